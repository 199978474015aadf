"""Allocate far more memory than the limit."""
# expect: limit memory
def main(args):
    blocks = []
    try:
        for _ in range(64):
            blocks.append(bytearray(64 << 20))  # 4 GiB in total, touched
    except MemoryError:
        return stopped(f"MemoryError after {len(blocks) * 64} MiB")
    return escaped(f"allocated {len(blocks) * 64} MiB")
