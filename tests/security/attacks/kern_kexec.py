"""Load a new kernel."""
# denied: kexec_load kexec_file_load
def main(args):
    a = refused("kexec_load", 0, 0, None, 0)
    if not a["stopped"]:
        return a
    return refused("kexec_file_load", -1, -1, 0, None, 0)
