"""Race the supervisor's artifact collection: a process left behind keeps
swapping files and directories of /workspace/out with symlinks to the host
secret (directly and through /proc/1/root, which the supervisor would
resolve on the host) while the run ends."""
# expect: no_process
SWAPPER = r'''
import os, sys
targets = sys.argv[2:5]
report = int(sys.argv[1])  # a byte for each round in which every swap was made
os.chdir("/workspace/out")

def attempt(fn, *args):
    try:
        fn(*args)
        return True
    except OSError:
        return False

n = 0
while True:  # until the end of the run kills it
    n += 1
    t = targets[n % len(targets)]
    done = []
    # "file": a regular file, then a symlink to the secret.
    try:
        with open(".f", "w") as f:
            f.write("decoy")
    except OSError:
        pass
    done.append(attempt(os.rename, ".f", "file"))
    attempt(os.unlink, ".l")
    done.append(attempt(os.symlink, t, ".l") and attempt(os.rename, ".l", "file"))
    # "dir": a directory holding a file, then a symlink to the secret's
    # directory (rename cannot put a symlink over a directory: move it aside).
    attempt(os.unlink, "dir/x")
    done.append(attempt(os.rename, "dir", ".old"))
    attempt(os.rmdir, ".old") or attempt(os.unlink, ".old")
    attempt(os.unlink, ".d")
    done.append(attempt(os.symlink, os.path.dirname(t), ".d") and attempt(os.rename, ".d", "dir"))
    done.append(attempt(os.rename, "dir", ".d") and attempt(os.unlink, ".d"))
    done.append(attempt(os.mkdir, "dir"))
    try:
        with open("dir/x", "w") as f:
            f.write("decoy")
    except OSError:
        done.append(False)
    if report >= 0 and all(done):
        try:
            os.write(report, b".")
        except OSError:  # the run's main process is gone: nobody reads
            os.close(report)
            report = -1
'''
def main(args):
    p = args.params
    targets = [p["secret_path"], "/proc/1/root" + p["secret_path"], "/proc/self/root" + p["secret_path"]]
    os.makedirs("/workspace/out/dir", exist_ok=True)
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        os.setsid()
        os.set_inheritable(w, True)
        # The marker in argv lets the harness check the swapper is gone.
        os.execv(sys.executable, [sys.executable, "-c", SWAPPER, str(w)] + targets + [p["marker"]])
    os.close(w)
    # The swapper must be swapping for real before the run ends.
    rounds, deadline = 0, time.monotonic() + 10
    os.set_blocking(r, False)
    while rounds < 20 and time.monotonic() < deadline:
        try:
            got = os.read(r, 64)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        if not got:
            return escaped(f"precondition: the swapper exited after {rounds} full rounds")
        rounds += len(got)
    if rounds < 20:
        return escaped(f"precondition: the swapper made only {rounds} full rounds in 10 s")
    return stopped(f"swapper running ({rounds} full rounds); the harness checks no artifact holds the secret "
                   "and the swapper is gone")
