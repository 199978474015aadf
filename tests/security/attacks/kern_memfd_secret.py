"""Make secret memory: each page of a memfd_secret mapping is taken out of
the kernel's direct map, splitting its huge pages for good (the host's
DirectMap2M shrank after a run ended). It must answer ENOSYS."""
def main(args):
    return refused("memfd_secret", 0, errnos=(errno.ENOSYS,))
