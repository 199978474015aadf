// Every profile key's effect on a real sandbox, through the CLI as operators
// use it: limits, env, mounts, masks, user, seccomp, workspace and artifacts.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture.h"
#include "nsbox/userns.h"
#include "nsbox/workspace.h"

namespace nsbox::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using Scratch = TempDir;

json run_json(const std::string& profile, std::vector<std::string> extra, std::vector<std::string> cmd) {
  std::vector<std::string> args = {"run", "--json", "--rootfs", test_rootfs(), "--profile", profile};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back("--");
  args.insert(args.end(), cmd.begin(), cmd.end());
  CliResult r = run_cli(args);
  json out = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(out.is_discarded()) << "exit " << r.exit_code << "\n" << r.out << r.err;
  return out;
}

// `nsbox run --rootfs ROOTFS FLAGS -- echo ran` must be a usage error (exit 2)
// found before the workload runs; what it says on stderr.
std::string refusal_of_run(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"run", "--rootfs", test_rootfs()};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--", "echo", "ran"});
  CliResult r = run_cli(args);
  std::string given;
  for (const auto& f : flags) given += " " + f;
  EXPECT_EQ(r.exit_code, 2) << given;
  EXPECT_EQ(r.out, "") << "the workload must not run:" << given;
  return r.err;
}

TEST(ProfileEffects, LimitsReachTheSandbox) {
  Scratch s;
  const std::string profile = s.write("p.yaml",
                                      "name: limits\nextends: default\n"
                                      "limits: {wall_time: 2s, tmpfs: 8MiB, stdout: 1KiB, open_files: 40,\n"
                                      "         file_size: 1MiB, memory: 96MiB, pids: 20}\n");
  json r = run_json(profile, {},
                    {"python3", "-c",
                     "import os, resource as r\n"
                     "print(r.getrlimit(r.RLIMIT_NOFILE)[0], r.getrlimit(r.RLIMIT_FSIZE)[0] >> 20,\n"
                     "      os.statvfs('/tmp').f_blocks * os.statvfs('/tmp').f_frsize >> 20)\n"
                     "print('x' * 5000)\n"});
  EXPECT_EQ(r["status"], "ok") << r.dump();
  EXPECT_EQ(r["stdout"].get<std::string>().substr(0, 8), "40 1 8\nx");
  EXPECT_EQ(r["stdout"].get<std::string>().size(), 1024u);
  EXPECT_EQ(r["stdout_truncated"], true);
  json t = run_json(profile, {}, {"sleep", "10"});
  EXPECT_EQ(t["status"], "timeout");
  EXPECT_LT(t["wall_ms"].get<int>(), 4000);
}

TEST(ProfileEffects, EnvMountsMasksAndUser) {
  Scratch s;
  fs::create_directory(s.path() + "/data");
  s.write("data/hello.txt", "dataset\n");
  const std::string profile = s.write("p.yaml",
                                      "name: tenant\nextends: default\nenv: {TENANT: acme}\n"
                                      "filesystem:\n  mounts:\n    - {source: " +
                                          s.path() +
                                          "/data, target: /data, mode: ro}\n"
                                          "  mask: [/etc/hostname]\nuser: {uid: 1000, gid: 1001}\n");
  json r = run_json(profile, {},
                    {"sh", "-c",
                     "echo $TENANT; cat /data/hello.txt; wc -c < /etc/hostname; id -u; id -g; touch /data/x 2>&1 | "
                     "grep -c Read-only"});
  EXPECT_EQ(r["status"], "ok") << r.dump();
  EXPECT_EQ(r["stdout"], "acme\ndataset\n0\n1000\n1001\n1\n");
}

TEST(ProfileEffects, ASeccompRuleFileIsTheRunsAllowList) {
  // The strict list without getcpu, from a file the profile names: getcpu
  // fails with EPERM and is named in the result; the rest of Python runs.
  Scratch s;
  std::string rules = "allow:\n";
  for (const auto& name : SeccompProgram::strict_syscalls())
    if (name != "getcpu") rules += "  - " + name + "\n";
  const std::string rule_file = s.write("tenant.rules", rules);
  const std::string profile = s.write("p.yaml", "name: ruled\nextends: default\nseccomp: " + rule_file + "\n");
  const std::string code =
      "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
      "r = libc.syscall(309, None, None, None)\nprint(r, ctypes.get_errno())\n";
  json r = run_json(profile, {}, {"python3", "-c", code});
  EXPECT_EQ(r["status"], "ok") << r.dump();
  EXPECT_EQ(r["stdout"], "-1 1\n") << r.dump();
  EXPECT_EQ(r["denied_syscalls"], json({{"getcpu", 1}})) << r.dump();
  // Read as the profile loads: `nsbox check` shows the list, not the path.
  CliResult check = run_cli({"check", profile});
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.out.find(" exit_group,"), std::string::npos) << check.out;
  EXPECT_EQ(check.out.find(rule_file), std::string::npos) << check.out;
}

TEST(ProfileEffects, StrictSeccompDeniesWhatIsNotListed) {
  // getcpu is harmless and allowed by the default policy, not listed by strict.
  const std::string code =
      "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
      "r = libc.syscall(309, None, None, None)\nprint(r, ctypes.get_errno())\n";
  json strict = run_json("strict", {}, {"python3", "-c", code});
  EXPECT_EQ(strict["stdout"], "-1 1\n") << strict.dump();
  json def = run_json("default", {}, {"python3", "-c", code});
  EXPECT_EQ(def["stdout"], "0 0\n") << def.dump();
}

TEST(ProfileEffects, OverridesOnlyTighten) {
  EXPECT_EQ(refusal_of_run({"--timeout", "100"}),
            "nsbox: timeout 100s exceeds the profile's limits.wall_time of 30s\n");
  EXPECT_EQ(refusal_of_run({"--memory", "1GiB"}), "nsbox: memory 1GiB exceeds the profile's limits.memory of 512MiB\n");
  json ok = run_json("default", {"--memory", "64MiB", "--timeout", "5"}, {"python3", "-c", "b = bytearray(100 << 20)"});
  EXPECT_EQ(ok["status"], "oom") << ok.dump();
}

TEST(ProfileEffects, AnOverrideBelowTheLowestLimitIsRefusedNotDropped) {
  // 0 would mean "no limit" further down: a run asking for less than the
  // lowest enforced limit must not end up with none.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--memory", "0B"}, "nsbox: memory 0B is below the lowest limit nsbox enforces, 16MiB\n"},
      {{"--memory", "1MiB"}, "nsbox: memory 1MiB is below the lowest limit nsbox enforces, 16MiB\n"},
      {{"--cpu-time", "0s"}, "nsbox: cpu time 0s is below the lowest limit nsbox enforces, 10ms\n"},
      {{"--timeout", "0.001"}, "nsbox: timeout 1ms is below the lowest limit nsbox enforces, 10ms\n"},
      {{"--cpus", "0.001"}, "nsbox: cpus 0.001 is below the lowest limit nsbox enforces, 0.01\n"},
      {{"--pids", "1"},
       "--pids: expected a whole number in 2..65536, got '1'\nRun with --help for more information.\n"},
  };
  for (const auto& [flags, error] : cases) EXPECT_EQ(refusal_of_run(flags), error);
}

TEST(ProfileEffects, AMistypedOptionIsRefusedNotPassedToTheCommand) {
  // Once, `--memroy 16MiB` ran unlimited with the flag among the command's
  // arguments.
  CliResult r = run_cli({"run", "--rootfs", test_rootfs(), "--memroy=16MiB", "--", "echo", "ran"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "nsbox: unknown option or argument before --: --memroy=16MiB (see nsbox run --help)\n");
  r = run_cli({"run", "--rootfs", test_rootfs(), "--bogus", "echo", "ran"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "nsbox: unknown option --bogus (see nsbox run --help; the command goes after --)\n");
  // The command's own options stay its own, in order, with or without --.
  r = run_cli({"run", "--rootfs", test_rootfs(), "--", "echo", "-n", "a", "--b"});
  EXPECT_EQ(r.out, "a --b");
  r = run_cli({"run", "--rootfs", test_rootfs(), "echo", "-n", "a", "--b"});
  EXPECT_EQ(r.out, "a --b");
  for (const auto& flags : std::vector<std::vector<std::string>>{{"--timeout", "nan"},
                                                                 {"--timeout", "5s"},
                                                                 {"--cpus", "nan"},
                                                                 {"--pids", "99999999999999999999"},
                                                                 {"--memory", ""},
                                                                 {"--rootfs", ""}}) {
    const std::string error = refusal_of_run(flags);
    EXPECT_NE(error.find(flags[0] + ": "), std::string::npos) << error;
  }
  // Numbers as profiles write them: no hex, no exponent, nothing past a year
  // (1e99 once read as "timeout 8760h exceeds ...", a value never given).
  for (const char* seconds : {"0x10", "1e99", "inf", "99999999999"})
    EXPECT_EQ(refusal_of_run({"--timeout", seconds}),
              std::string("--timeout: expected a number of seconds more than 0 and at most 31536000, in decimals, "
                          "got '") +
                  seconds + "'\nRun with --help for more information.\n");
}

TEST(ProfileEffects, ABadArtifactsDirectoryIsRefusedBeforeTheRun) {
  Scratch s;
  EXPECT_EQ(refusal_of_run({"--artifacts", s.path() + "/missing/deep"}),
            "nsbox: --artifacts " + s.path() + "/missing/deep: No such file or directory\n");
}

TEST(ProfileEffects, ACgroupParentThatCannotApplyIsRefused) {
  EXPECT_EQ(refusal_of_run({"--cgroup-parent", "/nonexistent/slice"}),
            "nsbox: --cgroup-parent /nonexistent/slice: No such file or directory\n");
  EXPECT_EQ(refusal_of_run({"--cgroup-parent", "relative/slice"}),
            "nsbox: --cgroup-parent relative/slice: expected an absolute path\n");
  // A plain directory holds no cgroups: runs would get none of its limits.
  EXPECT_EQ(refusal_of_run({"--cgroup-parent", "/tmp"}),
            "nsbox: --cgroup-parent /tmp: not a directory of the cgroup v2 file system\n");
  if (launcher().cgroup_host().choose({"memory", "cpu", "pids"}) == "v1" && launcher().cgroup_host().v2_mount) {
    // A hybrid host (this one): the v2 mount exists but runs use v1.
    const std::string error = refusal_of_run({"--cgroup-parent", *launcher().cgroup_host().v2_mount});
    EXPECT_NE(error.find("where a cgroup v2 parent does not apply"), std::string::npos) << error;
  }
}

TEST(ProfileEffects, OpenJiuwenConfigRunsPythonAndNodeUnderItsAllowList) {
  Scratch s;
  CliResult c = run_cli({"check", "--from", "openjiuwen",
                         std::string(NSBOX_SOURCE_DIR) + "/tests/profiles/openjiuwen/sandbox_config.migrated.yaml"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const std::string profile = s.write("openjiuwen.yaml", c.out);
  json py = run_json(profile, {}, {"python3", "-c", "print('hello from python')"});
  EXPECT_EQ(py["stdout"], "hello from python\n") << py.dump();
  json js = run_json(profile, {}, {"node", "-e", "console.log('hello from node')"});
  EXPECT_EQ(js["stdout"], "hello from node\n") << js.dump();
  // Its allow list has no unshare and no ptrace: both fail.
  json denied = run_json(profile, {},
                         {"python3", "-c",
                          "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\n"
                          "print(l.syscall(272, 0x10000000), ctypes.get_errno())\n"});
  EXPECT_EQ(denied["stdout"], "-1 1\n") << denied.dump();
}

TEST(ProfileEffects, CheckValidatesShippedAndRefusesBroken) {
  const std::string root = NSBOX_SOURCE_DIR;
  CliResult ok = run_cli({"check", root + "/profiles/default.yaml", root + "/profiles/strict.yaml",
                          root + "/profiles/tenants/minimal.yaml"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("name: strict"), std::string::npos);
  CliResult bad =
      run_cli({"check", root + "/profiles/default.yaml", root + "/tests/profiles/broken/bare_number_size.yaml"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("bare_number_size.yaml:"), std::string::npos) << bad.err;
}

TEST(Workspace, InputsInArtifactsOutWorkspaceGone) {
  Scratch s;
  const std::string input = s.write("in.csv", "a,b\n1,2\n");
  const std::string arts = s.path() + "/artifacts";
  json r = run_json("default", {"--input", input + ":data.csv", "--artifacts", arts},
                    {"sh", "-c",
                     "tail -1 /workspace/data.csv > /workspace/out/last.txt; mkdir /workspace/out/d; "
                     "echo deep > /workspace/out/d/e.txt; ln -s /etc/passwd /workspace/out/leak"});
  ASSERT_EQ(r["status"], "ok") << r.dump();
  ASSERT_EQ(r["artifacts"].size(), 2u) << r.dump();
  EXPECT_EQ(r["artifacts"][0]["name"], "d/e.txt");
  EXPECT_EQ(r["artifacts"][1]["name"], "last.txt");
  EXPECT_EQ(r["artifacts"][1]["size"], 4);
  // sha256 of "1,2\n"
  EXPECT_EQ(r["artifacts"][1]["sha256"], "52186c933993da4082b3cdc7c40bb4bf735b391ff54a2ef78c037dda6c38a680");
  EXPECT_EQ(r["artifacts_refused"], json::array({"leak: a symlink, not returned"}));
  std::ifstream copied(arts + "/last.txt");
  std::string line;
  std::getline(copied, line);
  EXPECT_EQ(line, "1,2");
  EXPECT_FALSE(fs::exists(arts + "/leak"));
  // Workspaces of other nsbox processes may exist (tests run in parallel);
  // none may outlive the process that made it, like the one above, for
  // longer than its removal takes: a node's killed worker leaves its own to
  // the spawner, which removes it once it has reaped the worker (the guest
  // rig saw one in that window).
  auto orphans = [] {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator("/tmp")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("nsbox-run-", 0) != 0) continue;
      const std::string pid = name.substr(10, name.find('-', 10) - 10);
      // (An nsbox that ends between the listing and this check removes its own.)
      if (!fs::exists("/proc/" + pid) && fs::exists(e.path())) found.push_back(e.path());
    }
    return found;
  };
  std::vector<std::string> left = orphans();
  for (int i = 0; i < 250 && !left.empty(); ++i, std::this_thread::sleep_for(std::chrono::milliseconds(20)))
    left = orphans();
  for (const auto& path : left) ADD_FAILURE() << path << " outlived its nsbox by 5 s";
}

TEST(Workspace, ArtifactsOverTheCapAreRefusedAndReported) {
  Scratch s;
  const std::string profile =
      s.write("p.yaml",
              "name: small\nextends: default\n"
              "filesystem:\n  workspace: {path: /workspace, max_artifacts: 2, max_artifact_bytes: 1KiB}\n");
  json r = run_json(profile, {},
                    {"sh", "-c", "cd /workspace/out; echo a > a; echo b > b; echo c > c; head -c 2000 /dev/zero > z"});
  ASSERT_EQ(r["status"], "ok") << r.dump();
  EXPECT_EQ(r["artifacts"].size(), 2u);
  EXPECT_EQ(r["artifacts_refused"], json::array({"c: over the cap of 2 artifacts", "z: over the cap of 2 artifacts"}));
}

TEST(Workspace, BadInputNamesAreRefused) {
  for (const char* name : {"../x", "a/b", ".."}) {
    const std::string error = refusal_of_run({"--input", std::string("/etc/hostname:") + name});
    EXPECT_NE(error.find("must be a plain file name"), std::string::npos) << error;
  }
}

TEST(Workspace, InputsThatCannotBeCopiedAreRefusedBeforeTheRun) {
  // Once each failed inside the launch with exit 125 (a sandbox error).
  Scratch s;
  const std::string file = s.write("data.csv", "a,b\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--input", file + ":a", "--input", file + ":a"},
       "nsbox: --input " + file + ": the name 'a' is already taken by " + file + "\n"},
      {{"--input", file + ":out"},
       "nsbox: --input " + file + ": the name 'out' is the workspace's artifact directory\n"},
      {{"--input", s.path() + "/missing.csv"},
       "nsbox: --input " + s.path() + "/missing.csv: No such file or directory\n"},
      {{"--input", s.path() + ":dir"}, "nsbox: --input " + s.path() + ": not a regular file\n"},
  };
  for (const auto& [flags, error] : cases) EXPECT_EQ(refusal_of_run(flags), error);
}

TEST(Workspace, SizeIsCappedByATmpfs) {
  if (::geteuid() != 0) GTEST_SKIP() << "the tmpfs workspace needs root";
  json r = run_json("strict", {}, {"true"});  // strict has no workspace
  EXPECT_TRUE(r["artifacts"].empty());
  Scratch s;
  const std::string profile = s.write("p.yaml", "name: tiny\nextends: default\nlimits: {tmpfs: 4MiB}\n");
  json w = run_json(profile, {}, {"sh", "-c", "head -c 8000000 /dev/zero > /workspace/big; echo $?"});
  EXPECT_EQ(w["stdout"], "1\n") << w.dump();
}

TEST(Workspace, ItsFilesAndDirectoriesAreCappedTooSoEmptyOnesCannotFillTheHost) {
  if (::geteuid() != 0) GTEST_SKIP() << "the tmpfs workspace needs root";
  // 16384 spare inodes beside the 64 artifacts: empty files cost no bytes,
  // so only the inode cap stops them.
  const std::string code =
      "import os\n"
      "n = 0\n"
      "try:\n"
      "    while n < 40000:\n"
      "        os.mkdir('/workspace/out/d%d' % n); n += 1\n"
      "except OSError as e:\n"
      "    print(n, e.errno)\n";
  json r = run_json("default", {}, {"python3", "-c", code});
  std::istringstream out(r["stdout"].get<std::string>());
  int made = 0, err = 0;
  out >> made >> err;
  EXPECT_EQ(err, ENOSPC) << r.dump();
  EXPECT_GT(made, 16000) << r.dump();
  EXPECT_LT(made, 16500) << r.dump();
  EXPECT_TRUE(r["artifacts"].empty()) << "empty directories are no artifacts";
}

// The run owns its workspace and may open it to everyone; another host user
// must still not reach it, or the two could talk past the sandbox's empty
// network (a unix socket there) and that user could read the inputs.
TEST(Workspace, ARunThatOpensItsWorkspaceToAllOpensItToNoOtherHostUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "the tmpfs workspace and another user need root";
  WorkspaceSpec spec;
  const HostIds ids = choose_host_ids();
  Workspace ws(spec, ids.uid, ids.gid);
  // What the run can do, as the owner of its directory.
  ASSERT_EQ(::chmod(ws.host_path().c_str(), 0777), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod((ws.host_path() + "/out").c_str(), 0777), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setresgid(65533, 65533, 65533) != 0 || ::setresuid(65533, 65533, 65533) != 0) ::_exit(2);
    const int fd = ::open((ws.host_path() + "/out").c_str(), O_RDONLY | O_DIRECTORY);
    ::_exit(fd >= 0 ? 0 : errno == EACCES ? 1 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << "0: another user opened the run's workspace";
}

// Mount points of workspaces made in dir (resolved), as mountinfo lists
// them (a space as \040).
std::vector<std::string> workspace_mounts_in(const std::string& dir) {
  std::string listed;
  for (char c : dir) listed += c == ' ' ? std::string("\\040") : std::string(1, c);
  std::vector<std::string> found;
  std::istringstream in(slurp("/proc/self/mountinfo"));
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, mount_point;
    f >> id >> parent >> dev >> root >> mount_point;
    if (mount_point.rfind(listed + "/nsbox-run-", 0) == 0) found.push_back(mount_point);
  }
  return found;
}

// TMPDIR set to a path for as long as it lives, then as it was.
class TmpdirSetTo {
 public:
  explicit TmpdirSetTo(const std::string& path) {
    if (const char* before = std::getenv("TMPDIR")) saved_ = before;
    ::setenv("TMPDIR", path.c_str(), 1);
  }
  ~TmpdirSetTo() {
    if (saved_.empty())
      ::unsetenv("TMPDIR");
    else
      ::setenv("TMPDIR", saved_.c_str(), 1);
  }
  TmpdirSetTo(const TmpdirSetTo&) = delete;
  TmpdirSetTo& operator=(const TmpdirSetTo&) = delete;

 private:
  std::string saved_;
};

// Another host user can make names in a shared /tmp before nsbox does.
// Every name it could foresee, the next runs' included, is taken first:
// the next workspace is still made, in a directory of nsbox's own.
TEST(Workspace, NamesAnotherUserMadeFirstInTmpDoNotStopARun) {
  Scratch s;
  TmpdirSetTo tmpdir(s.path());
  const HostIds ids = choose_host_ids();
  std::string first_name;
  {
    Workspace first(WorkspaceSpec{}, ids.uid, ids.gid);
    first_name = fs::path(first.host_path()).parent_path().filename().string();
  }
  // nsbox-run-<pid>-<start>-<n>...: the part a squatter can foresee.
  std::vector<std::string> parts;
  std::istringstream in(first_name);
  for (std::string part; std::getline(in, part, '-');) parts.push_back(part);
  ASSERT_GE(parts.size(), 5u) << first_name;
  const std::string foreseen = parts[0] + "-" + parts[1] + "-" + parts[2] + "-" + parts[3] + "-";
  const int n = std::stoi(parts[4]);
  for (int next = n + 1; next <= n + 50; ++next)
    ASSERT_EQ(::mkdir((s.path() + "/" + foreseen + std::to_string(next)).c_str(), 0755), 0);
  std::unique_ptr<Workspace> ws;
  try {
    ws = std::make_unique<Workspace>(WorkspaceSpec{}, ids.uid, ids.gid);
  } catch (const std::exception& e) {
    FAIL() << "a name made first stopped the run: " << e.what();
  }
  const fs::path outer = fs::path(ws->host_path()).parent_path();
  struct stat st {};
  ASSERT_EQ(::stat(outer.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u) << outer;
  EXPECT_EQ(st.st_uid, ::geteuid() == 0 ? ids.uid : ::geteuid()) << outer;
}

// A private TMPDIR (mode 0700, as pam_tmpdir gives root) keeps the
// sandbox's host user from the workspace: the run is refused naming that
// directory and what would do (it failed inside the sandbox as a mount of
// /workspace); a TMPDIR others may pass through (0711) serves.
TEST(Workspace, ATmpdirTheSandboxUserCannotPassThroughIsNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "a sandbox user apart from the caller needs root";
  Scratch s;
  const std::string tmp = s.path() + "/private";
  ASSERT_EQ(::mkdir(tmp.c_str(), 0700), 0);
  TmpdirSetTo tmpdir(tmp);
  CliResult r = run_cli({"run", "--rootfs", test_rootfs(), "--", "true"});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find(tmp + " (mode 0700, owner uid 0) does not let the sandbox's host user"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("chmod o+x"), std::string::npos) << r.err;
  EXPECT_EQ(dir_entries(tmp).size(), 0u) << "nothing made for a refused run";
  ASSERT_EQ(::chmod(tmp.c_str(), 0711), 0);
  r = run_cli({"run", "--rootfs", test_rootfs(), "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// What an nsbox killed mid-run left is removed by the next one, which
// counts it (the node's spawner says so in its log).
TEST(Workspace, TheNextNsboxCountsWhatItRemovedOfADeadOnes) {
  if (::geteuid() != 0) GTEST_SKIP() << "the sweep of the sandbox user's directories needs root";
  Scratch s;
  TmpdirSetTo tmpdir(s.path());
  const HostIds ids = choose_host_ids();
  const std::string left = s.path() + "/nsbox-run-1-1-1-abcdef";  // pid 1's start time never matches: dead
  ASSERT_EQ(::mkdir(left.c_str(), 0700), 0);
  ASSERT_EQ(::chown(left.c_str(), ids.uid, ids.gid), 0);
  const Launcher after_a_crash;
  EXPECT_GE(after_a_crash.stale_removed(), 1);
  EXPECT_NE(::access(left.c_str(), F_OK), 0) << "not removed";
}

// The artifacts are read through the workspace nsbox made, not its path:
// with the path unmounted and removed under the run (a sweep that took it
// for a crashed nsbox's, an operator's rm), they came back as none, and
// "ok".
TEST(Workspace, ArtifactsComeBackWhenTheWorkspacePathIsRemovedUnderTheRun) {
  if (::geteuid() != 0) GTEST_SKIP() << "the tmpfs workspace needs root";
  Scratch s;
  const std::string tmp = s.path() + "/tmp";
  ASSERT_EQ(::mkdir(tmp.c_str(), 0755), 0);
  char resolved[PATH_MAX];
  ASSERT_NE(::realpath(tmp.c_str(), resolved), nullptr);
  TmpdirSetTo tmpdir(resolved);
  const std::string arts = s.path() + "/arts";
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  const std::string nsbox = NSBOX_BINARY;
  const std::vector<std::string> args = {
      nsbox, "run", "--rootfs", test_rootfs(), "--artifacts",
      arts,  "--",  "sh",       "-c",          "echo made > /workspace/out/a.txt; read line"};
  const pid_t cli = ::fork();
  if (cli == 0) {
    ::dup2(go[0], 0);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(go[0]);
  std::vector<std::string> mounts;
  for (int i = 0; i < 2000; ++i, ::usleep(10000)) {
    mounts = workspace_mounts_in(resolved);
    if (!mounts.empty() && ::access((mounts[0] + "/out/a.txt").c_str(), F_OK) == 0) break;
  }
  ASSERT_FALSE(mounts.empty()) << "the run's workspace was never mounted";
  ASSERT_EQ(::umount2(mounts[0].c_str(), MNT_DETACH), 0) << std::strerror(errno);
  fs::remove_all(fs::path(mounts[0]).parent_path());
  ASSERT_EQ(::write(go[1], "go\n", 3), 3);
  ::close(go[1]);
  EXPECT_EQ(wait_cli(cli), 0);
  EXPECT_EQ(slurp(arts + "/a.txt"), "made\n") << "the run's artifact was lost with the path";
}

// In a shared /tmp another user may name a directory as nsbox names its
// workspaces; the stale sweep (run as root) leaves it alone rather than
// walk whatever that user keeps adding to it.
TEST(Workspace, TheSweepLeavesAnotherUsersDirectoryOfThatNameAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "another user's directory needs root to make";
  Scratch s;
  TmpdirSetTo tmpdir(s.path());
  const std::string theirs = s.path() + "/nsbox-run-1-1-1";  // pid 1's start time never matches: "dead"
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((theirs + "/d").c_str(), 0700), 0);
  ASSERT_EQ(::chown((theirs + "/d").c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  const CliResult r = run_cli({"run", "--rootfs", test_rootfs(), "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(theirs + "/d")) << "the sweep walked another user's directory";
}

// nsbox killed during a run leaves the run's workspace mounted; the next
// nsbox removes it, whatever the spelling of TMPDIR (mountinfo names the
// mount point resolved: a trailing slash or a symlink once hid it).
TEST(Workspace, TheNextNsboxRemovesAKilledOnesWorkspaceWhateverTmpdirsSpelling) {
  if (::geteuid() != 0) GTEST_SKIP() << "the tmpfs workspace needs root";
  Scratch s;
  char resolved[PATH_MAX];
  ASSERT_NE(::realpath(s.path().c_str(), resolved), nullptr);
  const std::string real = std::string(resolved) + "/real dir";  // mountinfo escapes the space
  ASSERT_EQ(::mkdir(real.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(real.c_str(), (s.path() + "/link").c_str()), 0);
  auto tmpdir = std::make_unique<TmpdirSetTo>(s.path() + "/link/");
  const std::string marker = unique_token("nsbox-stale-ws-");
  const pid_t cli =
      spawn_cli({"run", "--rootfs", test_rootfs(), "--", "python3", "-c", "import time; time.sleep(1000)", marker});
  std::vector<std::string> mounts;
  for (int i = 0; i < 1000 && mounts.empty(); ++i) {
    mounts = workspace_mounts_in(real);
    if (mounts.empty()) ::usleep(10000);
  }
  ::kill(cli, SIGKILL);
  wait_cli(cli);
  EXPECT_FALSE(workspace_mounts_in(real).empty()) << "left mounted by the killed nsbox";
  const CliResult r = run_cli({"run", "--rootfs", test_rootfs(), "--", "true"});
  tmpdir.reset();
  ASSERT_FALSE(mounts.empty()) << "the run's workspace was never mounted";
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(workspace_mounts_in(real).empty()) << "the stale workspace is still mounted";
  for (const auto& e : fs::directory_iterator(real)) ADD_FAILURE() << e.path() << " survived";
  EXPECT_TRUE(wait_for_no_process(marker, 5000)) << "the run outlived its killed nsbox";
}

}  // namespace
}  // namespace nsbox::testing
