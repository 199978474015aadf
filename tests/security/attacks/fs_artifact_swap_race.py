"""Race the supervisor's artifact collection: a process left behind keeps
swapping files and directories of /workspace/out with symlinks to the host
secret (directly and through /proc/1/root, which the supervisor would
resolve on the host) while the run ends."""
# expect: no_process
SWAPPER = r'''
import os, sys
targets = sys.argv[1:4]
n = 0
while True:  # until the end of the run kills it
    n += 1
    t = targets[n % len(targets)]
    try:
        with open("/workspace/out/.f", "w") as f:
            f.write("decoy")
        os.rename("/workspace/out/.f", "/workspace/out/file")
        os.symlink(t, "/workspace/out/.l")
        os.rename("/workspace/out/.l", "/workspace/out/file")
        os.symlink(os.path.dirname(t), "/workspace/out/.d")
        os.rename("/workspace/out/.d", "/workspace/out/dir")
        os.rename("/workspace/out/dir", "/workspace/out/.d2")
        os.unlink("/workspace/out/.d2")
        os.mkdir("/workspace/out/dir")
    except OSError:
        pass
'''
def main(args):
    p = args.params
    targets = [p["secret_path"], "/proc/1/root" + p["secret_path"], "/proc/self/root" + p["secret_path"]]
    os.makedirs("/workspace/out/dir", exist_ok=True)
    if os.fork() == 0:
        os.setsid()
        # The marker in argv lets the harness check the swapper is gone.
        os.execv(sys.executable, [sys.executable, "-c", SWAPPER] + targets + [p["marker"]])
    time.sleep(0.2)  # let the swapping run while the run ends
    return stopped("swapper left running; the harness checks no artifact holds the secret and the swapper is gone")
