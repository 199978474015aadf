// Every call the seccomp filter denies with EPERM, made from a child
// process of this run (it inherits the run's filters: in a forked run, the
// ones becomeWorkload loaded, which no Python attack reaches). Each call's
// arguments are harmless should the rule be missing: bad fds, paths that do
// not exist, null pointers, no-op flags. Each must fail with EPERM, and the
// run must count each as refused by its filter.
// denied: ptrace process_vm_readv process_vm_writev mount umount2 pivot_root chroot
// denied: fsopen fsconfig fsmount fspick move_mount open_tree mount_setattr unshare setns
// denied: keyctl add_key request_key bpf perf_event_open userfaultfd kexec_load kexec_file_load
// denied: init_module finit_module delete_module open_by_handle_at name_to_handle_at acct
// denied: swapon swapoff reboot syslog settimeofday clock_settime clock_adjtime adjtimex
// denied: quotactl quotactl_fd lookup_dcookie iopl ioperm uselib vhangup sethostname setdomainname
// denied: personality ioctl socket socketpair modify_ldt
const NOWHERE = '/nonexistent-nsbox';
// [name, x86_64 number, arguments]: a string is passed as a C string.
const CALLS = [
  ['ptrace', 101, [16, 1, 0, 0]], ['process_vm_readv', 310, [1, 0, 0, 0, 0, 0]],
  ['process_vm_writev', 311, [1, 0, 0, 0, 0, 0]], ['mount', 165, [0, 0, 0, 0, 0]], ['umount2', 166, [NOWHERE, 0]],
  ['pivot_root', 155, [NOWHERE, NOWHERE]], ['chroot', 161, [NOWHERE]], ['fsopen', 430, ['nsbox-nofs', 0]],
  ['fsconfig', 431, [-1, 0, 0, 0, 0]], ['fsmount', 432, [-1, 0, 0]], ['fspick', 433, [-1, NOWHERE, 0]],
  ['move_mount', 429, [-1, NOWHERE, -1, NOWHERE, 0]], ['open_tree', 428, [-1, NOWHERE, 0]],
  ['mount_setattr', 442, [-1, NOWHERE, 0, 0, 0]], ['unshare', 272, [0]], ['setns', 308, [-1, 0]],
  ['keyctl', 250, [0, -3, 0]], ['add_key', 248, [0, 0, 0, 0, 0]], ['request_key', 249, [0, 0, 0, 0]],
  ['bpf', 321, [-1, 0, 0]], ['perf_event_open', 298, [0, 0, -1, -1, 0]], ['userfaultfd', 323, [-1]],
  ['kexec_load', 246, [0, 0, 0, -1]], ['kexec_file_load', 320, [-1, -1, 0, 0, -1]], ['init_module', 175, [0, 0, 0]],
  ['finit_module', 313, [-1, 0, 0]], ['delete_module', 176, [0, 0]], ['open_by_handle_at', 304, [-1, 0, 0]],
  ['name_to_handle_at', 303, [-1, 0, 0, 0, 0]], ['acct', 163, [NOWHERE]], ['swapon', 167, [NOWHERE, 0]],
  ['swapoff', 168, [NOWHERE]], ['reboot', 169, [0, 0, 0, 0]], ['syslog', 103, [10, 0, 0]],
  ['settimeofday', 164, [0, 0]], ['clock_settime', 227, [-1, 0]], ['clock_adjtime', 305, [-1, 0]],
  ['adjtimex', 159, [0]], ['quotactl', 179, [0, 0, 0, 0]], ['quotactl_fd', 443, [-1, 0, 0, 0]],
  ['lookup_dcookie', 212, [0, 0, 0]], ['iopl', 172, [0]], ['ioperm', 173, [0, 0, 0]], ['uselib', 134, [0]],
  ['vhangup', 153, []], ['sethostname', 170, [0, 0]], ['setdomainname', 171, [0, 0]],
  ['personality', 135, [0x0040000]], ['ioctl', 16, [-1, 0x5412, 0]], // TIOCSTI
  ['socket', 41, [40, 1, 0]], ['socketpair', 53, [2, 1, 0, 0]], // AF_VSOCK; AF_INET, no array
  ['modify_ldt', 154, [0, 0, 0]], // read 0 bytes
];
const CALLER = `
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
for name, nr, args in json.loads(sys.argv[1]):
    cargs = [ctypes.c_char_p(a.encode()) if isinstance(a, str) else ctypes.c_long(a) for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *cargs)
    out[name] = [r, ctypes.get_errno()]
print(json.dumps(out))
`;
function main(args) {
  const r = childProcess.spawnSync('python3', ['-c', CALLER, JSON.stringify(CALLS)], { encoding: 'utf8', timeout: 20000 });
  let results;
  try {
    results = JSON.parse(r.stdout);
  } catch (e) {
    return escaped(`precondition: the child made no report: ${r.error || r.stderr || r.status}`);
  }
  const wrong = CALLS.map(([name]) => [name, results[name]]).filter(([, res]) => !res || res[0] !== -1 || res[1] !== 1);
  if (wrong.length) return escaped(`not refused with EPERM: ${wrong.map(([n, res]) => `${n} -> ${JSON.stringify(res)}`).join(', ')}`);
  return stopped(`all ${CALLS.length} refused with EPERM`);
}
