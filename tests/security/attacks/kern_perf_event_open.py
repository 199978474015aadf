"""Open a perf event (a source of kernel exploits and side channels)."""
# denied: perf_event_open
def main(args):
    attr = ctypes.create_string_buffer(struct.pack("IIQ", 1, 128, 0) + b"\0" * 112)
    return refused("perf_event_open", attr, 0, -1, -1, 0)
