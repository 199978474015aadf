"""Flood stdout to exhaust the supervisor's memory."""
# expect: truncated
def main(args):
    line = "x" * 1023 + "\n"
    for _ in range(64 * 1024):
        sys.stdout.write(line)
    sys.stdout.flush()
    return stopped("64 MiB written; the harness checks the capture was capped")
