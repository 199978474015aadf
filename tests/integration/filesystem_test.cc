// Bind mounts, extra tmpfs and masks, and the attacks on them that must fail.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fixture.h"

namespace nsbox::testing {
namespace {

namespace fs = std::filesystem;

using HostDir = TempDir;

TEST(Filesystem, ReadOnlyBindIsReadableNotWritable) {
  HostDir dir;
  dir.write("data.csv", "a,b\n1,2\n");
  RunSpec spec = capture_spec({"python3", "-c",
                               "import errno\n"
                               "print(open('/data/data.csv').read().splitlines()[1])\n"
                               "try:\n"
                               "    open('/data/new', 'w'); print('WROTE')\n"
                               "except OSError as e:\n"
                               "    print(errno.errorcode[e.errno])\n"});
  spec.binds = {{dir.path(), "/data", true, false}};
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "1,2\nEROFS\n");
  EXPECT_FALSE(fs::exists(dir.path() + "/new"));
}

TEST(Filesystem, ReadWriteBindWritesReachTheHost) {
  HostDir dir;
  ::chmod(dir.path().c_str(), 0777);
  RunSpec spec = capture_spec({"sh", "-c", "echo result > /out/r.txt && echo ok"});
  spec.binds = {{dir.path(), "/out", false, false}};
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  std::ifstream in(dir.path() + "/r.txt");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "result");
  struct stat st {};
  ASSERT_EQ(::stat((dir.path() + "/r.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, launcher().host_ids().uid) << "written as the unprivileged host id";
}

TEST(Filesystem, NoexecBindRefusesExecution) {
  HostDir dir;
  dir.write("run.sh", "#!/bin/sh\necho ran\n");
  ::chmod((dir.path() + "/run.sh").c_str(), 0755);
  RunSpec spec = capture_spec({"/scripts/run.sh"});
  spec.binds = {{dir.path(), "/scripts", true, true}};
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kSetupError);
  EXPECT_EQ(r.error, "execve /scripts/run.sh: Permission denied");
  spec.binds[0].noexec = false;
  r = run_with(spec);
  EXPECT_EQ(r.stdout_data, "ran\n");
}

TEST(Filesystem, SymlinkInRwMountCannotRedirectAMountTarget) {
  // A previous run left /out/sub -> /etc in a persistent rw mount; a later
  // mount at /out/sub must not follow it onto the sandbox's (or host's) /etc.
  HostDir out, data;
  ASSERT_EQ(::symlink("/etc", (out.path() + "/sub").c_str()), 0);
  RunSpec spec = capture_spec({"true"});
  spec.binds = {{out.path(), "/out", false, false}, {data.path(), "/out/sub", true, false}};
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kSetupError);
  EXPECT_EQ(r.error, "resolve mount target /out/sub: Too many levels of symbolic links");
}

TEST(Filesystem, AMountInsideAHostBindUsesItsMountPointAndNeverMakesOne) {
  // A tmpfs and a bind below a rw host directory: nsbox must not make their
  // mount points in the host's directory.
  HostDir out, data;
  data.write("f", "data\n");
  RunSpec spec = capture_spec({"sh", "-c", "cat /out/sub/f; touch /out/scratch/t && echo tmpfs"});
  spec.binds = {{out.path(), "/out", false, false}, {data.path(), "/out/sub", true, false}};
  spec.tmpfs = {{"/out/scratch", 1 << 20}};
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kSetupError);
  EXPECT_NE(r.error.find("needs " + out.path() + "/"), std::string::npos) << r.error;
  EXPECT_FALSE(fs::exists(out.path() + "/sub"));
  EXPECT_FALSE(fs::exists(out.path() + "/scratch"));
  // With the mount points there, both mount over them.
  fs::create_directory(out.path() + "/sub");
  fs::create_directory(out.path() + "/scratch");
  r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "data\ntmpfs\n");
  EXPECT_TRUE(fs::is_empty(out.path() + "/scratch"));
}

TEST(Filesystem, AMountInsideTheWorkspaceMayMakeItsMountPoint) {
  HostDir data;
  data.write("f", "data\n");
  RunSpec spec = capture_spec({"cat", "/workspace/in/f"});
  spec.workspace = WorkspaceSpec{};
  spec.workspace->inside_path = "/workspace";
  spec.binds = {{data.path(), "/workspace/in", true, false}};
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "data\n");
}

TEST(Filesystem, SymlinkInRootfsCannotRedirectAMountTarget) {
  // /lib64 in the rootfs is a symlink (merged /usr); a target through it is refused.
  HostDir data;
  RunSpec spec = capture_spec({"true"});
  spec.binds = {{data.path(), "/lib64/x", true, false}};
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kSetupError);
  EXPECT_EQ(r.error, "resolve mount target /lib64/x: Too many levels of symbolic links");
}

TEST(Filesystem, SourceWithASymlinkComponentIsRefused) {
  HostDir dir;
  fs::create_directory(dir.path() + "/real");
  ASSERT_EQ(::symlink((dir.path() + "/real").c_str(), (dir.path() + "/link").c_str()), 0);
  RunSpec spec = capture_spec({"true"});
  spec.binds = {{dir.path() + "/link", "/data", true, false}};
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kSetupError);
  EXPECT_EQ(r.error, "open mount source " + dir.path() + "/link: Too many levels of symbolic links");
}

TEST(Filesystem, ExtraTmpfsIsWritableAndCapped) {
  RunSpec spec = capture_spec({"sh", "-c",
                               "dd if=/dev/zero of=/scratch/f bs=1M count=3 2>/dev/null; "
                               "echo $?; df -k /scratch | tail -1 | awk '{print $2}'"});
  spec.tmpfs = {{"/scratch", 2 << 20}};
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "1\n2048\n");
}

TEST(Filesystem, TargetInsideAReadOnlyMountMustExist) {
  RunSpec spec = capture_spec({"true"});
  spec.tmpfs = {{"/usr/nope", 1 << 20}};
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kSetupError);
  EXPECT_EQ(r.error, "resolve mount target /usr/nope: Read-only file system");
}

TEST(Filesystem, MasksHideFilesAndDirectories) {
  RunSpec spec = capture_spec({"sh", "-c", "wc -c < /etc/passwd; ls -A /var | wc -l; cat /etc/hostname"});
  spec.masks = {"/etc/passwd", "/var", "/does/not/exist"};
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "0\n0\nsandbox\n");
}

TEST(Filesystem, MasksHideWhatIsThereWhenTheyAreMounted) {
  // A directory and a file inside a host bind, and /dev/shm (a tmpfs nsbox
  // makes): what is hidden is what the run would otherwise see there.
  HostDir data;
  fs::create_directory(data.path() + "/secret");
  data.write("secret/key", "KEY");
  data.write("token", "TOKEN");
  data.write("public", "ok\n");
  RunSpec spec = capture_spec({"sh", "-c",
                               "ls -A /data/secret | wc -l; wc -c < /data/token; cat /data/public; "
                               "touch /dev/shm/x 2>/dev/null && echo shm-writable; ls -A /dev/shm | wc -l"});
  spec.binds = {{data.path(), "/data", true, false}};
  spec.masks = {"/data/secret", "/data/token", "/dev/shm"};
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "0\n0\nok\n0\n");
}

}  // namespace
}  // namespace nsbox::testing
