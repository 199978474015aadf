"""Load a BPF program or map."""
# denied: bpf
def main(args):
    attr = ctypes.create_string_buffer(128)
    return refused("bpf", 0, attr, 128)
