"""Outlive the run with setsid and a double fork."""
# expect: no_process
def main(args):
    marker = args.params["marker"]
    os.system(f"setsid sh -c 'sleep 1000 {marker} & sleep 1000 {marker}' >/dev/null 2>&1 &")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "1001", marker])
        os._exit(0)
    time.sleep(0.3)
    return stopped("daemons started; the harness checks none survives the run")
