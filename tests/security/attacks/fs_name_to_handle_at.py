"""Get a file handle of / to forge handles for other inodes."""
# denied: name_to_handle_at
def main(args):
    buf = ctypes.create_string_buffer(struct.pack("II", 128, 0) + b"\0" * 128)
    mount_id = ctypes.c_int()
    return refused("name_to_handle_at", -100, b"/", buf, ctypes.byref(mount_id), 0)
