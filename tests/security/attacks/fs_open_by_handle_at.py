"""Open a host inode by file handle (the 'shocker' escape)."""
# denied: open_by_handle_at
def main(args):
    # struct file_handle for ext4 root inode 2, generation 0.
    handle = ctypes.create_string_buffer(struct.pack("II", 8, 1) + struct.pack("II", 2, 0))
    return refused("open_by_handle_at", -100, handle, os.O_RDONLY)
