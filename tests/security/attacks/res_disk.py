"""Fill the disk through /tmp or the workspace."""
def main(args):
    chunk = b"x" * (1 << 20)
    for path in ("/tmp/fill", "/workspace/fill"):
        written = 0
        try:
            with open(path, "wb") as f:
                for _ in range(2048):
                    f.write(chunk)
                    written += 1
                f.flush()
        except OSError as e:
            if written >= 2048:
                return escaped(f"{path}: wrote 2 GiB")
            continue
        except Exception as e:
            continue
        return escaped(f"{path}: wrote {written} MiB")
    return stopped("writes stopped by size caps")
