"""Connect to a host process's abstract unix socket (they are per network
namespace): the name must not exist in the sandbox's (ECONNREFUSED)."""
def main(args):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    return fails("connect to host abstract socket", s.connect, "\0" + args.params["abstract"],
                 errnos=(errno.ECONNREFUSED,))
