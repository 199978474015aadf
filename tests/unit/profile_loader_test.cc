#include "nsbox/profile_loader.h"
#include "nsbox/run_spec.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "nsbox/check.h"
#include "nsbox/error.h"

namespace nsbox {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

const std::string kSource = NSBOX_SOURCE_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// what() with the source directory removed, so expectations read
// "tests/profiles/broken/x.yaml:3:4: ...".
std::string relative_error(const std::exception& e) {
  std::string msg = e.what();
  const std::string prefix = kSource + "/";
  for (size_t p; (p = msg.find(prefix)) != std::string::npos;) msg.erase(p, prefix.size());
  return msg;
}

ProfileSearch repo_search() { return ProfileSearch{{kSource + "/profiles"}}; }

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "nsbox-profile-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::string path_;
};

// Same policy: the fields a printed profile cannot carry are taken over.
Profile without_origin(Profile p, const Profile& like) {
  p.source_file = like.source_file;
  p.inheritance = like.inheritance;
  return p;
}

void expect_round_trip(const Profile& p) {
  std::string yaml = to_yaml(p);
  Profile again = load_profile_text(yaml, "<printed>", ProfileSearch{});
  EXPECT_EQ(without_origin(again, p), p) << yaml;
  std::string yaml_again = to_yaml(again);
  EXPECT_EQ(yaml_again.substr(yaml_again.find('\n')), yaml.substr(yaml.find('\n')));
}

// ---- who may have written a profile ----

std::string load_error(const std::string& name_or_path, const ProfileSearch& search) {
  try {
    load_profile(name_or_path, search);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A profile decides what runs may do: one that someone other than root or
// nsbox's user could have written is refused, never obeyed. A binary run
// from /tmp/x/bin once took /tmp/x/profiles/default.yaml, which any user
// could make, for every run's default.
TEST(ProfileTrust, AProfileOthersCouldHaveWrittenIsRefused) {
  TempDir dir;
  const std::string planted = dir.write("bin/../profiles/default.yaml", "name: default\nlimits: {memory: 1TiB}\n");
  const ProfileSearch beside_binary = default_profile_search(dir.path() + "/bin");
  const std::string profiles = dir.path() + "/profiles";
  ASSERT_EQ(::chmod(planted.c_str(), 0666), 0);
  EXPECT_NE(load_error("default", beside_binary).find("not trusted: writable by group or others (mode 0666)"),
            std::string::npos)
      << load_error("default", beside_binary);
  EXPECT_NE(load_error(planted, ProfileSearch{}).find("not trusted"), std::string::npos) << "by path too";
  ASSERT_EQ(::chmod(planted.c_str(), 0644), 0);
  ASSERT_EQ(::chmod(profiles.c_str(), 0777), 0);
  EXPECT_NE(load_error("default", beside_binary)
                .find("not trusted: its directory " + profiles + " is writable by group or others (mode 0777)"),
            std::string::npos)
      << load_error("default", beside_binary);
  ASSERT_EQ(::chmod(profiles.c_str(), 01777), 0);  // sticky, as /tmp: others cannot replace our file
  EXPECT_EQ(load_error("default", beside_binary), "");
  ASSERT_EQ(::chmod(profiles.c_str(), 0755), 0);
  EXPECT_EQ(load_profile("default", beside_binary).limits.memory, 1ull << 40) << "trusted: used";
  // A link in a directory others may write points wherever they like.
  const std::string open_dir = dir.path() + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(::symlink(planted.c_str(), (open_dir + "/link.yaml").c_str()), 0);
  EXPECT_NE(load_error(open_dir + "/link.yaml", ProfileSearch{})
                .find("not trusted: its directory " + open_dir + " is writable by group or others"),
            std::string::npos)
      << load_error(open_dir + "/link.yaml", ProfileSearch{});
  if (::geteuid() != 0) GTEST_SKIP() << "the owner check needs root to give the file away";
  ASSERT_EQ(::chown(planted.c_str(), 65534, 65534), 0);
  EXPECT_NE(load_error("default", beside_binary).find("not trusted: owned by uid 65534"), std::string::npos)
      << load_error("default", beside_binary);
}

// A file named as a profile or a rule file by mistake (a token file, a
// password file) is described, never quoted: its errors reach logs and the
// node's audit log.
TEST(ProfileTrust, AFileThatIsNoProfileIsNotQuotedInItsError) {
  TempDir dir;
  const std::string token = dir.write("token", "tok-SECRET-0123456789abcdef\n");
  const std::string shadow = dir.write("shadow", "root:SECRET:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n");
  const std::string with_rules = dir.write("p.yaml", "name: p\nseccomp: " + shadow + "\n");
  const std::string with_token = dir.write("q.yaml", "name: q\nseccomp: " + token + "\n");
  for (const std::string& path : {token, shadow, with_rules, with_token}) {
    const std::string e = load_error(path, ProfileSearch{});
    EXPECT_FALSE(e.empty()) << path;
    EXPECT_EQ(e.find("SECRET"), std::string::npos) << e;
  }
  EXPECT_NE(load_error(token, ProfileSearch{}).find("got a string of 27 bytes"), std::string::npos)
      << load_error(token, ProfileSearch{});
  EXPECT_NE(load_error(with_rules, ProfileSearch{}).find("unknown key of 29 bytes in seccomp"), std::string::npos)
      << load_error(with_rules, ProfileSearch{});
}

// ---- the corpus of broken profiles ----

TEST(BrokenProfiles, EachFailsWithItsExactMessage) {
  const std::string dir = kSource + "/tests/profiles/broken";
  ProfileSearch search{{dir, dir + "/lib"}};
  std::ifstream expected(dir + "/expected.txt");
  ASSERT_TRUE(expected) << "tests/profiles/broken/expected.txt missing";
  std::set<std::string> covered;
  std::string line;
  while (std::getline(expected, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t colon = line.find(": ");
    ASSERT_NE(colon, std::string::npos) << line;
    std::string file = line.substr(0, colon);
    std::string message = line.substr(colon + 2);
    covered.insert(file);
    try {
      load_profile_file(dir + "/" + file, search);
      ADD_FAILURE() << file << " loaded without error";
    } catch (const ProfileError& e) {
      EXPECT_EQ(relative_error(e), message) << file;
    }
  }
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    EXPECT_TRUE(covered.count(entry.path().filename().string()))
        << entry.path().filename() << " has no line in expected.txt";
  }
  EXPECT_GE(files, 32u);
  EXPECT_EQ(files, covered.size());
}

TEST(ProfileErrors, CarryThePosition) {
  try {
    load_profile_text("name: t\nlimits:\n  pids: many\n", "x.yaml", ProfileSearch{});
    FAIL();
  } catch (const ProfileError& e) {
    EXPECT_EQ(e.file(), "x.yaml");
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 9);
    EXPECT_EQ(e.message(), "limits.pids: expected an integer in 2..65536, got \"many\"");
    EXPECT_STREQ(e.what(), "x.yaml:3:9: limits.pids: expected an integer in 2..65536, got \"many\"");
  }
}

// A YAML escape spells any character in a value; an error that quotes it
// shows no control character a terminal would obey.
TEST(ProfileErrors, QuoteNoControlCharacters) {
  EXPECT_EQ(printable("a\x1b[31mb\xc2\x9b"
                      "c\td\x7f\xc3\xa9"),
            "a?[31mb?c?d?\xc3\xa9");
  try {
    load_profile_text("name: esc\nlimits:\n  memory: \"1\\x1b]0;owned\\x07GiB\"\nenv:\n  \"A\\u009bB\": x\n",
                      "esc.yaml", ProfileSearch{});
    FAIL() << "loaded";
  } catch (const ProfileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("?]0;owned?GiB"), std::string::npos) << what;
    EXPECT_EQ(what.find('\x1b'), std::string::npos);
    EXPECT_EQ(what.find('\x07'), std::string::npos);
    EXPECT_EQ(e.message().find('\x1b'), std::string::npos);
  }
}

// Depth inside a rw host directory counts from the nearest mount above: a
// mount point in between cannot be moved, and a workspace or tmpfs is the
// run's own. A workspace deep in one is refused like a mount.
TEST(ProfileErrors, MountPointsDeepInAWritableHostDirectoryCountFromTheNearestMount) {
  const std::string rw = "  mounts:\n    - {source: /srv, target: /data, mode: rw}\n";
  for (const std::string& fine :
       {rw + "    - {source: /etc, target: /data/x}\n    - {source: /usr, target: /data/x/y}\n",
        rw + "  tmpfs: [/data/t]\n  mask: [/data/t/a/b]\n", rw + "  workspace: {path: /data/ws}\n"})
    EXPECT_NO_THROW(load_profile_text("name: fine\nfilesystem:\n" + fine, "fine.yaml", ProfileSearch{})) << fine;
  try {
    load_profile_text("name: deep\nfilesystem:\n" + rw + "  workspace: {path: /data/a/ws}\n", "deep.yaml",
                      ProfileSearch{});
    FAIL() << "loaded";
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("filesystem.workspace.path: lies more than one level inside /data"),
              std::string::npos)
        << e.what();
  }
}

TEST(ProfileErrors, APidsLimitNoRunCanLiveUnderIsRefused) {
  // One pid is the sandbox's init alone: the workload's fork would fail.
  try {
    load_profile_text("name: t\nlimits:\n  pids: 1\n", "x.yaml", ProfileSearch{});
    FAIL() << "pids: 1 was accepted";
  } catch (const ProfileError& e) {
    EXPECT_EQ(std::string(e.what()), "x.yaml:3:9: limits.pids: 1 is out of range 2..65536");
  }
  EXPECT_EQ(load_profile_text("name: t\nlimits:\n  pids: 2\n", "x.yaml", ProfileSearch{}).limits.pids, 2u);
}

TEST(ProfileErrors, DeepNestingIsNamedNotABadFile) {
  try {
    load_profile_text("name: t\nlimits: " + std::string(100000, '['), "x.yaml", ProfileSearch{});
    FAIL() << "deep nesting was accepted";
  } catch (const ProfileError& e) {
    EXPECT_EQ(e.message(), "YAML nested too deeply for the parser: flatten the document") << e.what();
    EXPECT_GT(e.line(), 0) << "it has a position";
  }
}

TEST(ProfileErrors, UnreadableFileHasNoPosition) {
  try {
    load_profile_file("/nonexistent/p.yaml", ProfileSearch{});
    FAIL();
  } catch (const ProfileError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/p.yaml: No such file or directory");
    EXPECT_EQ(e.line(), 0);
  }
  TempDir tmp;
  try {
    load_profile_file(tmp.path(), ProfileSearch{});
    FAIL();
  } catch (const ProfileError& e) {
    EXPECT_EQ(std::string(e.what()), tmp.path() + ": not a regular file");
  }
}

// ---- shipped profiles ----

TEST(ShippedProfiles, AllPassCheck) {
  std::vector<std::string> files;
  for (const char* sub : {"profiles", "profiles/tenants"}) {
    for (const auto& e : fs::directory_iterator(kSource + "/" + sub)) {
      if (e.path().extension() == ".yaml") files.push_back(e.path().string());
    }
  }
  EXPECT_GE(files.size(), 6u);
  std::ostringstream out, err;
  EXPECT_EQ(run_check(files, false, repo_search(), out, err), 0) << err.str();
  EXPECT_EQ(err.str(), "");
}

TEST(Profiles, ForkServerIsAChoiceThatRoundTrips) {
  Profile off = load_profile_text("name: a\n", "a.yaml", ProfileSearch{});
  EXPECT_FALSE(off.fork_server.any());
  EXPECT_EQ(to_yaml(off).find("fork_server"), std::string::npos);
  Profile on = load_profile_text("name: b\nfork_server: true\n", "b.yaml", ProfileSearch{});
  EXPECT_TRUE(on.fork_server.python);
  EXPECT_TRUE(on.fork_server.javascript);
  expect_round_trip(on);
  for (const char* language : {"python", "javascript"}) {
    Profile one =
        load_profile_text(std::string("name: c\nfork_server: [") + language + "]\n", "c.yaml", ProfileSearch{});
    EXPECT_EQ(one.fork_server.python, std::string(language) == "python");
    EXPECT_EQ(one.fork_server.javascript, std::string(language) == "javascript");
    expect_round_trip(one);
  }
  Profile none = load_profile_text("name: d\nfork_server: []\n", "d.yaml", ProfileSearch{});
  EXPECT_FALSE(none.fork_server.any());
}

TEST(ShippedProfiles, DefaultHasTheDocumentedValues) {
  Profile p = load_profile("default", repo_search());
  EXPECT_EQ(p.name, "default");
  EXPECT_EQ(p.limits.wall_time, milliseconds(30000));
  EXPECT_EQ(p.limits.cpu_time, milliseconds(30000));
  EXPECT_EQ(p.limits.memory, 512ull << 20);
  EXPECT_EQ(p.limits.pids, 128u);
  EXPECT_EQ(p.limits.cpus, 1.0);
  EXPECT_EQ(p.limits.tmpfs, 64ull << 20);
  EXPECT_EQ(p.limits.stdout_bytes, 1ull << 20);
  EXPECT_EQ(p.limits.stderr_bytes, 1ull << 20);
  EXPECT_EQ(p.limits.open_files, 256u);
  EXPECT_EQ(p.limits.file_size, 64ull << 20);
  EXPECT_EQ(p.limits.inotify_instances, 8u);
  EXPECT_EQ(p.limits.inotify_watches, 8192u);
  EXPECT_EQ(p.seccomp, "default");
  EXPECT_EQ(p.env.at("LANG"), "C.UTF-8");
  EXPECT_EQ(p.env.at("PYTHONDONTWRITEBYTECODE"), "1");
  ASSERT_TRUE(p.workspace);
  EXPECT_EQ(p.workspace->path, "/workspace");
  EXPECT_EQ(p.tmpfs, (std::vector<ProfileTmpfs>{{"/tmp", 64ull << 20}}));
  EXPECT_EQ(p.uid, 65534u);
  EXPECT_TRUE(p.inheritance.empty());
}

TEST(ShippedProfiles, PythonNodeStrictAndTenants) {
  Profile py = load_profile("python", repo_search());
  EXPECT_EQ(py.inheritance, std::vector<std::string>{"default"});
  EXPECT_EQ(py.env.at("PYTHONUNBUFFERED"), "1");
  EXPECT_EQ(py.env.at("LANG"), "C.UTF-8");

  Profile node = load_profile("node", repo_search());
  EXPECT_EQ(node.inheritance, std::vector<std::string>{"default"});
  EXPECT_EQ(node.limits, load_profile("default", repo_search()).limits);

  Profile strict = load_profile("strict", repo_search());
  EXPECT_EQ(strict.limits.wall_time, milliseconds(5000));
  EXPECT_EQ(strict.limits.memory, 128ull << 20);
  EXPECT_EQ(strict.limits.pids, 32u);
  EXPECT_EQ(strict.seccomp, "strict");
  EXPECT_FALSE(strict.workspace);

  Profile acme = load_profile(kSource + "/profiles/tenants/acme-analytics.yaml", repo_search());
  EXPECT_EQ(acme.inheritance, (std::vector<std::string>{"python", "default"}));
  ASSERT_EQ(acme.mounts.size(), 1u);
  EXPECT_EQ(acme.mounts[0], (ProfileMount{"/srv/nsbox/datasets/acme", "/data", MountMode::kReadOnly, true}));
  EXPECT_EQ(acme.env.at("PYTHONUNBUFFERED"), "1");

  Profile minimal = load_profile(kSource + "/profiles/tenants/minimal.yaml", repo_search());
  Profile def = load_profile("default", repo_search());
  EXPECT_LT(minimal.limits.memory, def.limits.memory);
  EXPECT_LT(minimal.limits.wall_time, def.limits.wall_time);
  EXPECT_LT(minimal.limits.pids, def.limits.pids);
}

TEST(ShippedProfiles, DefaultMasksAreAlwaysThere) {
  Profile p = load_profile_text("name: bare\n", "bare.yaml", ProfileSearch{});
  EXPECT_EQ(p.mask, (std::vector<std::string>{"/proc/kcore", "/proc/sysrq-trigger", "/proc/sys", "/sys/firmware"}));
  Profile more =
      load_profile_text("name: more\nfilesystem: {mask: [/proc/keys, /proc/sys]}\n", "more.yaml", ProfileSearch{});
  EXPECT_EQ(more.mask, (std::vector<std::string>{"/proc/kcore", "/proc/sysrq-trigger", "/proc/sys", "/sys/firmware",
                                                 "/proc/keys"}));
}

// ---- printing ----

TEST(RoundTrip, ShippedProfiles) {
  for (const char* name : {"default", "python", "node", "strict"}) {
    SCOPED_TRACE(name);
    expect_round_trip(load_profile(name, repo_search()));
  }
  expect_round_trip(load_profile(kSource + "/profiles/tenants/acme-analytics.yaml", repo_search()));
  expect_round_trip(load_profile(kSource + "/profiles/tenants/api-caller.yaml", repo_search()));
  expect_round_trip(load_profile(kSource + "/profiles/tenants/minimal.yaml", repo_search()));
}

TEST(RoundTrip, EveryKeyAwayFromItsDefault) {
  TempDir dir;
  const std::string rules = dir.write("tight.rules", "allow: [read, write, execve, exit_group, futex]\n");
  Profile p = load_profile_text(R"(name: everything
limits:
  wall_time: 1500ms
  cpu_time: 90s
  memory: 100000000B
  pids: 7
  cpus: 0.33
  tmpfs: 3MiB
  stdout: 0B
  stderr: 12345B
  open_files: 1000
  file_size: 1TiB
  inotify_instances: 0
  inotify_watches: 1048576
  enforcement: best-effort
filesystem:
  rootfs: /var/lib/nsbox/rootfs/custom
  mounts:
    - {source: /srv/a, target: /a, mode: rw, noexec: true}
    - {source: /srv/b, target: /b}
  tmpfs:
    - /home/sandbox
    - {path: /tmp, size: 5MiB}
    - {path: /cache, size: 1GiB}
  mask: [/proc/keys]
  workspace: {path: /work, max_artifacts: 0, max_artifact_bytes: 1B}
env:
  EMPTY: ""
  NUMBERISH: "1"
  BOOLISH: "true"
  NULLISH: "null"
  SPACES: "  a b  "
  QUOTES: "say \"hi\"\n"
  UNICODE: "héllo"
seccomp: )" + rules + R"(
network: {mode: none}
user: {uid: 1000, gid: 1001}
)",
                                "everything.yaml", ProfileSearch{});
  EXPECT_EQ(p.limits.cpus, 0.33);
  EXPECT_EQ(p.limits.inotify_instances, 0u);
  EXPECT_EQ(p.limits.inotify_watches, 1048576u);
  EXPECT_EQ(p.limits.enforcement, Enforcement::kBestEffort);
  EXPECT_EQ(p.tmpfs,
            (std::vector<ProfileTmpfs>{{"/home/sandbox", 3ull << 20}, {"/tmp", 5ull << 20}, {"/cache", 1ull << 30}}));
  EXPECT_EQ(p.env.at("QUOTES"), "say \"hi\"\n");
  expect_round_trip(p);

  // A variable past what the kernel passes to a program would fail every
  // run's execve: refused where it is written.
  try {
    load_profile_text("name: big\nenv: {A: \"" + std::string(kMaxEnvEntry, 'x') + "\"}\n", "big.yaml", ProfileSearch{});
    ADD_FAILURE() << "a 128 KiB variable was accepted";
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("big.yaml:2:10: env.A: 131075 bytes with its name; the kernel passes at most "
                                         "128 KiB per variable"),
              std::string::npos)
        << e.what();
  }

  Profile allow = load_profile_text("name: allow\nseccomp: {allow: [read, write, execve, exit_group]}\n", "allow.yaml",
                                    ProfileSearch{});
  EXPECT_EQ(allow.seccomp, "allow");
  EXPECT_EQ(allow.seccomp_allow, (std::vector<std::string>{"read", "write", "execve", "exit_group"}));
  expect_round_trip(allow);
}

// ---- seccomp rule files ----

TEST(SeccompRuleFile, IsReadAsTheProfileLoadsAndItsListCarriedInline) {
  TempDir dir;
  const std::string rules = dir.write(
      "tight.rules", "# tenant x: what its jobs need\nallow:\n  - read\n  - write\n  - execve\n  - exit_group\n");
  Profile p = load_profile_text("name: filed\nseccomp: " + rules + "\n", "filed.yaml", ProfileSearch{});
  EXPECT_EQ(p.seccomp, "allow");
  EXPECT_EQ(p.seccomp_allow, (std::vector<std::string>{"read", "write", "execve", "exit_group"}));
  const std::string yaml = to_yaml(p);
  EXPECT_EQ(yaml.find(rules), std::string::npos) << "the resolved profile names the file instead of its list:\n"
                                                 << yaml;
  fs::remove(rules);
  expect_round_trip(p);  // the resolved profile needs the file no longer
}

// What a rule file error says: "FILE:LINE:COL: MESSAGE" as for a profile.
std::string rule_file_error(const std::string& profile_text) {
  try {
    load_profile_text(profile_text, "filed.yaml", ProfileSearch{});
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "loaded without error";
}

TEST(SeccompRuleFile, ItsErrorsNameItsOwnLines) {
  TempDir dir;
  const std::string unknown = dir.write("unknown.rules", "allow:\n  - read\n  - frobnicate\n");
  EXPECT_EQ(rule_file_error("name: filed\nseccomp: " + unknown + "\n"),
            unknown + ":3:5: seccomp.allow[1]: unknown system call \"frobnicate\" on x86_64");
  const std::string deny = dir.write("deny.rules", "deny: [ptrace]\n");
  EXPECT_EQ(rule_file_error("name: filed\nseccomp: " + deny + "\n"), deny + ":1:1: unknown key 'deny' in seccomp");
  const std::string list = dir.write("list.rules", "[read, write]\n");
  EXPECT_EQ(rule_file_error("name: filed\nseccomp: " + list + "\n"),
            list + ":1:1: seccomp: a rule file holds {allow: [...]}, got a list");
  const std::string empty = dir.write("empty.rules", "allow: []\n");
  EXPECT_EQ(rule_file_error("name: filed\nseccomp: " + empty + "\n"),
            empty + ":1:8: seccomp.allow: an empty allow list would deny even exit: list the system calls to allow");
}

TEST(SeccompRuleFile, OneThatCannotBeReadIsAnErrorOfTheProfile) {
  TempDir dir;
  EXPECT_EQ(
      rule_file_error("name: filed\nseccomp: " + dir.path() + "/none.rules\n"),
      "filed.yaml:2:10: seccomp: cannot read the rule file " + dir.path() + "/none.rules: No such file or directory");
  EXPECT_EQ(rule_file_error("name: filed\nseccomp: " + dir.path() + "\n"),
            "filed.yaml:2:10: seccomp: cannot read the rule file " + dir.path() + ": not a regular file");
  EXPECT_EQ(rule_file_error("name: filed\nseccomp: tight.rules\n"),
            "filed.yaml:2:10: seccomp: expected default, strict, the absolute path of a rule file or {allow: "
            "[...]}, got \"tight.rules\"");
}

TEST(RoundTrip, NetworkEgress) {
  Profile p = load_profile_text(R"(name: egress
network:
  mode: egress
  allow:
    - {host: API.Example.com., ports: [443, 443, 8443]}
    - {host: "*.example.org", ports: [443]}
    - {cidr: 203.0.113.0/24, ports: [80, 443]}
    - {cidr: "2001:db8::/32", ports: [443]}
  deny_private: false
  max_connections: 5
  max_bytes: 1MiB
)",
                                "egress.yaml", ProfileSearch{});
  EXPECT_EQ(p.network, NetworkMode::kEgress);
  ASSERT_EQ(p.egress.allow.size(), 4u);
  EXPECT_EQ(p.egress.allow[0].host, "api.example.com");  // normalized
  EXPECT_EQ(p.egress.allow[0].ports, (std::vector<uint16_t>{443, 8443}));
  EXPECT_EQ(p.egress.allow[2].cidr->str(), "203.0.113.0/24");
  EXPECT_FALSE(p.egress.deny_private);
  EXPECT_EQ(p.egress.max_connections, 5u);
  EXPECT_EQ(p.egress.max_bytes, 1u << 20);
  expect_round_trip(p);

  Profile bare = load_profile_text("name: bare\nnetwork: {mode: egress}\n", "bare.yaml", ProfileSearch{});
  EXPECT_TRUE(bare.egress.allow.empty());  // a proxy that refuses everything, and says so
  EXPECT_TRUE(bare.egress.deny_private);
  expect_round_trip(bare);
}

TEST(Extends, NetworkAllowIsReplacedAndModeNoneRevokesIt) {
  TempDir dir;
  dir.write("parent.yaml",
            "name: parent\nnetwork:\n  mode: egress\n  allow: [{host: a.example.com, ports: [443]}]\n"
            "  max_connections: 9\n");
  dir.write("child.yaml", "name: child\nextends: parent\nnetwork:\n  allow: [{host: b.example.com, ports: [443]}]\n");
  dir.write("closed.yaml", "name: closed\nextends: parent\nnetwork: {mode: none}\n");
  ProfileSearch search{{dir.path()}};
  Profile child = load_profile("child", search);
  EXPECT_EQ(child.network, NetworkMode::kEgress);
  ASSERT_EQ(child.egress.allow.size(), 1u);
  EXPECT_EQ(child.egress.allow[0].host, "b.example.com");
  EXPECT_EQ(child.egress.max_connections, 9u);
  Profile closed = load_profile("closed", search);
  EXPECT_EQ(closed.network, NetworkMode::kNone);
  EXPECT_EQ(closed.egress, EgressPolicy{});
}

TEST(RoundTrip, PrintsEveryKeyInSchemaOrder) {
  std::string yaml = to_yaml(load_profile("default", repo_search()));
  size_t last = 0;
  for (const char* key : {"name:",
                          "limits:",
                          "wall_time:",
                          "cpu_time:",
                          "memory:",
                          "pids:",
                          "cpus:",
                          "tmpfs:",
                          "stdout:",
                          "stderr:",
                          "open_files:",
                          "file_size:",
                          "inotify_instances:",
                          "inotify_watches:",
                          "enforcement:",
                          "filesystem:",
                          "rootfs:",
                          "mounts:",
                          "tmpfs:",
                          "mask:",
                          "workspace:",
                          "env:",
                          "seccomp:",
                          "network:",
                          "mode:",
                          "user:",
                          "uid:",
                          "gid:"}) {
    size_t at = yaml.find(key, last);
    ASSERT_NE(at, std::string::npos) << key << " missing or out of order in\n" << yaml;
    last = at;
  }
  EXPECT_EQ(yaml.find("extends"), std::string::npos);
}

// ---- extends ----

TEST(Extends, MergesMapsKeyByKeyAndListsByTheirKey) {
  TempDir dir;
  dir.write("base.yaml", R"(name: base
limits: {wall_time: 20s, memory: 256MiB, tmpfs: 32MiB}
filesystem:
  mounts:
    - {source: /srv/shared, target: /shared}
    - {source: /srv/tools, target: /tools}
  tmpfs: [/home/sandbox]
  mask: [/proc/keys]
env: {A: base, B: base}
seccomp: {allow: [read, write, execve, exit_group]}
user: {uid: 1000, gid: 1000}
)");
  dir.write("mid.yaml", "name: mid\nextends: base\nenv: {B: mid, C: mid}\n");
  std::string child = dir.write("child.yaml", R"(name: child
extends: mid
limits: {memory: 128MiB, tmpfs: 8MiB}
filesystem:
  mounts:
    - {source: /srv/tenant, target: /shared, mode: rw}
    - {source: /srv/data, target: /data}
  mask: [/proc/keys, /proc/timer_list]
  workspace: false
env: {C: child}
seccomp: default
)");
  Profile p = load_profile_file(child, ProfileSearch{{dir.path()}});
  EXPECT_EQ(p.name, "child");
  EXPECT_EQ(p.inheritance, (std::vector<std::string>{"mid", "base"}));
  EXPECT_EQ(p.limits.wall_time, milliseconds(20000));  // from base
  EXPECT_EQ(p.limits.memory, 128ull << 20);            // child overrides
  EXPECT_EQ(p.limits.pids, ProfileLimits{}.pids);      // built-in default
  EXPECT_EQ(p.env, (std::map<std::string, std::string>{{"A", "base"}, {"B", "mid"}, {"C", "child"}}));
  EXPECT_EQ(p.mounts, (std::vector<ProfileMount>{{"/srv/tenant", "/shared", MountMode::kReadWrite, false},
                                                 {"/srv/tools", "/tools", MountMode::kReadOnly, false},
                                                 {"/srv/data", "/data", MountMode::kReadOnly, false}}));
  // An unsized tmpfs entry takes the final limits.tmpfs, the child's.
  EXPECT_EQ(p.tmpfs, (std::vector<ProfileTmpfs>{{"/tmp", 8ull << 20}, {"/home/sandbox", 8ull << 20}}));
  EXPECT_EQ(p.mask.back(), "/proc/timer_list");
  EXPECT_EQ(std::count(p.mask.begin(), p.mask.end(), "/proc/keys"), 1);
  EXPECT_FALSE(p.workspace);
  EXPECT_EQ(p.seccomp, "default");
  EXPECT_TRUE(p.seccomp_allow.empty());
  EXPECT_EQ(p.uid, 1000u);
}

TEST(Extends, WorkspaceMergesKeyByKey) {
  TempDir dir;
  dir.write("base.yaml", "name: base\nfilesystem: {workspace: {path: /ws, max_artifacts: 5}}\n");
  Profile p = load_profile_text("name: c\nextends: base\nfilesystem: {workspace: {max_artifact_bytes: 1MiB}}\n",
                                "c.yaml", ProfileSearch{{dir.path()}});
  ASSERT_TRUE(p.workspace);
  EXPECT_EQ(*p.workspace, (ProfileWorkspace{"/ws", 5, 1ull << 20}));
}

TEST(Extends, ErrorsInAParentNameTheParentFile) {
  TempDir dir;
  std::string parent = dir.write("base.yaml", "name: base\nlimits: {pids: 0}\n");
  try {
    load_profile_text("name: c\nextends: base\n", "c.yaml", ProfileSearch{{dir.path()}});
    FAIL();
  } catch (const ProfileError& e) {
    EXPECT_EQ(std::string(e.what()), parent + ":2:16: limits.pids: 0 is out of range 2..65536");
  }
}

TEST(Extends, EightAncestorsAreAllowedNineAreNot) {
  TempDir dir;
  for (int i = 1; i <= 7; ++i) {
    dir.write("p" + std::to_string(i) + ".yaml",
              "name: p" + std::to_string(i) + "\nextends: p" + std::to_string(i + 1) + "\n");
  }
  dir.write("p8.yaml", "name: p8\nextends: default\n");
  // p1 .. p8 and default: nine ancestors.
  EXPECT_THROW(load_profile_text("name: p0\nextends: p1\n", "p0.yaml", ProfileSearch{{dir.path()}}), ProfileError);
  // p2 .. p8 and default: eight.
  Profile p = load_profile_text("name: p0\nextends: p2\n", "p0.yaml", ProfileSearch{{dir.path()}});
  EXPECT_EQ(p.inheritance.size(), 8u);
  EXPECT_EQ(p.inheritance.front(), "p2");
  EXPECT_EQ(p.inheritance.back(), "default");
}

// ---- search ----

TEST(Search, DefaultSearchOrder) {
  const char* saved = std::getenv("NSBOX_PROFILE_PATH");
  std::optional<std::string> before = saved ? std::optional<std::string>(saved) : std::nullopt;
  ::setenv("NSBOX_PROFILE_PATH", "/a/profiles::/b", 1);
  ProfileSearch s = default_profile_search("/opt/nsbox/bin");
  ::unsetenv("NSBOX_PROFILE_PATH");
  ProfileSearch without = default_profile_search("");
  if (before) ::setenv("NSBOX_PROFILE_PATH", before->c_str(), 1);
  EXPECT_EQ(s.dirs, (std::vector<std::string>{"/a/profiles", "/b", "/etc/nsbox/profiles", NSBOX_DATADIR "/profiles",
                                              "/opt/nsbox/profiles"}));
  EXPECT_EQ(without.dirs, (std::vector<std::string>{"/etc/nsbox/profiles", NSBOX_DATADIR "/profiles"}));
}

TEST(Search, BuildDirectoryFindsTheRepositoryProfiles) {
  ProfileSearch s = default_profile_search(kSource + "/build");
  EXPECT_EQ(s.dirs.back(), kSource + "/profiles");
}

TEST(Search, DefaultIsBuiltIn) {
  Profile embedded = load_profile("default", ProfileSearch{});
  EXPECT_EQ(embedded.source_file, "<embedded>");
  Profile file = load_profile("default", repo_search());
  EXPECT_EQ(file.source_file, kSource + "/profiles/default.yaml");
  EXPECT_EQ(without_origin(embedded, file), file);
  EXPECT_EQ(embedded_default_profile(), read_text(kSource + "/profiles/default.yaml"));
  // A child of default loads with no profile directory at all.
  Profile child = load_profile_text("name: c\nextends: default\n", "c.yaml", ProfileSearch{{"/nonexistent"}});
  EXPECT_EQ(child.inheritance, std::vector<std::string>{"default"});
}

TEST(Search, AFileWinsOverTheBuiltInAndEarlierDirectoriesWin) {
  TempDir one, two;
  one.write("default.yaml", "name: default\nlimits: {pids: 11}\n");
  two.write("default.yaml", "name: default\nlimits: {pids: 22}\n");
  two.write("only-two.yaml", "name: only-two\n");
  ProfileSearch s{{one.path(), two.path()}};
  EXPECT_EQ(load_profile("default", s).limits.pids, 11u);
  EXPECT_EQ(load_profile("only-two", s).source_file, two.path() + "/only-two.yaml");
}

TEST(Search, NamesAndPaths) {
  TempDir dir;
  std::string path = dir.write("x.yaml", "name: not-x\n");
  EXPECT_EQ(load_profile(path, ProfileSearch{}).name, "not-x");                // a path: any name
  EXPECT_THROW(load_profile("x", ProfileSearch{{dir.path()}}), ProfileError);  // a name must match
  try {
    load_profile("missing", ProfileSearch{{"/d1", "/d2"}});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "profile 'missing' not found: no missing.yaml in /d1, /d2");
  }
  EXPECT_THROW(load_profile("Bad Name", ProfileSearch{}), std::invalid_argument);
  EXPECT_THROW(load_profile("relative.yaml", ProfileSearch{}), ProfileError);  // a path, missing
}

TEST(ProfileNames, Syntax) {
  for (const char* good : {"default", "a", "0", "tenant-acme.python_3", "x.y"}) {
    EXPECT_TRUE(is_valid_profile_name(good)) << good;
  }
  for (const char* bad : {"", "-a", ".a", "_a", "A", "a b", "a/b", "é"}) {
    EXPECT_FALSE(is_valid_profile_name(bad)) << bad;
  }
  EXPECT_TRUE(is_valid_profile_name(std::string(64, 'a')));
  EXPECT_FALSE(is_valid_profile_name(std::string(65, 'a')));
}

// ---- check ----

TEST(Check, PrintsValidProfilesAndReportsErrors) {
  std::ostringstream out, err;
  std::vector<std::string> files = {kSource + "/profiles/python.yaml", kSource + "/tests/profiles/broken/uid_zero.yaml",
                                    "strict"};
  EXPECT_EQ(run_check(files, false, repo_search(), out, err), 1);
  EXPECT_EQ(out.str().rfind("---\n# profile python", 0), 0u) << out.str();
  EXPECT_NE(out.str().find("---\n# profile strict"), std::string::npos);
  EXPECT_EQ(err.str(), kSource +
                           "/tests/profiles/broken/uid_zero.yaml:3:8: user.uid: the sandbox user must not be "
                           "root inside (uid 0)\n");
  std::ostringstream out2, err2;
  EXPECT_EQ(run_check({}, false, repo_search(), out2, err2), 1);
  EXPECT_EQ(err2.str(), "nsbox check: no profile given\n");
}

TEST(Check, OutputLoadsBack) {
  std::ostringstream out, err;
  ASSERT_EQ(run_check({"python"}, false, repo_search(), out, err), 0);
  Profile printed = load_profile_text(out.str(), "out.yaml", ProfileSearch{});
  Profile python = load_profile("python", repo_search());
  EXPECT_EQ(without_origin(printed, python), python);
}

// ---- migration from openJiuwen ----

const std::string kOpenJiuwen = kSource + "/tests/profiles/openjiuwen";

std::string migration_error(const std::string& path) {
  try {
    load_openjiuwen_config(path);
  } catch (const ProfileError& e) {
    return relative_error(e);
  }
  return "(no error)";
}

TEST(OpenJiuwen, PublishedFileIsRefusedForItsSharedNetwork) {
  EXPECT_EQ(migration_error(kOpenJiuwen + "/sandbox_config.yaml"),
            "tests/profiles/openjiuwen/sandbox_config.yaml:15:8: namespace.net: false would share the "
            "host's network with the sandbox; nsbox always gives a sandbox its own network namespace, "
            "and what it may reach is the profile's network section (mode none, or egress through "
            "nsbox's proxy with an allow list): set net: True to migrate");
  EXPECT_EQ(migration_error(kOpenJiuwen + "/gateway_sandbox_config.yaml"),
            "tests/profiles/openjiuwen/gateway_sandbox_config.yaml:13:9: namespace.user: false would "
            "share the host's user namespace; nsbox always creates it: set user: True");
}

TEST(OpenJiuwen, PublishedFileWithIsolatedNetworkMigrates) {
  Profile p = load_openjiuwen_config(kOpenJiuwen + "/sandbox_config.migrated.yaml");
  EXPECT_EQ(p.name, "openjiuwen");
  EXPECT_EQ(p.inheritance, std::vector<std::string>{"default"});
  EXPECT_EQ(p.seccomp, "allow");
  ASSERT_EQ(p.seccomp_allow.size(), 86u);
  EXPECT_EQ(p.seccomp_allow.front(), "setsockopt");
  EXPECT_EQ(p.seccomp_allow.back(), "ioctl");
  // The nine read mounts bind host system directories (/lib, /usr/bin, ...)
  // that nsbox's rootfs provides itself, and the dev mount of /dev/urandom is
  // a node nsbox always has: all are dropped.
  EXPECT_TRUE(p.mounts.empty());
  EXPECT_EQ(p.limits.wall_time, milliseconds(10000));
  EXPECT_EQ(p.limits.cpu_time, milliseconds(10000));
  EXPECT_EQ(p.env.at("PATH"), "/bin:/usr/bin:/usr/local/bin");
  EXPECT_EQ(p.env.at("LANG"), "C.UTF-8");  // from default
  expect_round_trip(p);
}

const char* kMinimalConfig =
    R"(namespace: {user: True, net: True, pid: True, ipc: True, uts: True, cgroup: True}
mount:
  - {src: /usr/lib, dst: /usr/lib, mode: read}
)";

std::string migrate_text(const std::string& text) {
  TempDir dir;
  std::string path = dir.write("sandbox_config.yaml", text);
  try {
    load_openjiuwen_config(path);
  } catch (const ProfileError& e) {
    std::string msg = e.what();
    return msg.substr(path.size() + 1);
  }
  return "(no error)";
}

TEST(OpenJiuwen, MinimalConfigKeepsDefaults) {
  EXPECT_EQ(migrate_text(kMinimalConfig), "(no error)");
  TempDir dir;
  Profile p = load_openjiuwen_config(dir.write("c.yaml", kMinimalConfig));
  Profile def = load_profile("default", ProfileSearch{});
  EXPECT_EQ(p.limits, def.limits);
  EXPECT_EQ(p.seccomp, "default");
  EXPECT_TRUE(p.seccomp_allow.empty());
}

TEST(OpenJiuwen, DeviceMounts) {
  std::string base = kMinimalConfig;
  EXPECT_EQ(migrate_text(base + "  - {src: /dev/null, dst: /dev/null, mode: dev}\n"
                                "  - {src: /dev/tty, dst: /dev/tty, mode: dev}\n"),
            "(no error)");
  EXPECT_EQ(migrate_text(base + "  - {src: /dev/sda, dst: /dev/sda, mode: dev}\n"),
            "4:42: mount[1].mode: a device mount (mode dev) is not supported: nsbox gives every sandbox "
            "/dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom and /dev/tty, and no other "
            "device");
  EXPECT_EQ(migrate_text(base + "  - {src: /srv/x, dst: /x, mode: exec}\n"),
            "4:34: mount[1].mode: expected read, write or dev, got \"exec\"");
  EXPECT_EQ(migrate_text(base + "  - {src: /srv/x, dst: /proc/x, mode: write}\n"),
            "4:24: mount[1].dst: a mount cannot go onto /proc or below: nsbox builds /proc itself");
  EXPECT_EQ(migrate_text(base + "  - {src: /srv/x, dst: /usr/lib, mode: write}\n"),
            "4:24: mount[1].dst: duplicate mount target /usr/lib (also mount[0])");
  EXPECT_EQ(migrate_text(base + "  - {src: /srv/x, dst: /tmp, mode: write}\n"),
            "4:24: mount[1].dst: /tmp is a tmpfs in every nsbox sandbox");
  for (const char* src : {"/usr/bin", "/etc", "/usr/lib/python3"})
    EXPECT_EQ(migrate_text(std::string("mount:\n  - {src: ") + src + ", dst: /data, mode: write}\n"),
              "2:" + std::to_string(31 + std::string(src).size()) + ": mount[0].mode: mode write of " + src +
                  ", the host's system files: runs could change them (give a directory of its own for data)");
}

TEST(OpenJiuwen, Namespaces) {
  EXPECT_EQ(migrate_text("namespace: {user: True, net: True, pid: False, ipc: True, uts: True, cgroup: True}\n"),
            "1:41: namespace.pid: false would share the host's pid namespace; nsbox always creates it: "
            "set "
            "pid: True");
  EXPECT_EQ(migrate_text("namespace: {user: True, pid: True, ipc: True, uts: True, cgroup: True}\n"),
            "1:12: namespace.net is absent, which the platform reads as false: it would share the host's "
            "network with the sandbox; nsbox always gives a sandbox its own network namespace, and what "
            "it may reach is the profile's network section (mode none, or egress through nsbox's proxy "
            "with an allow list): set net: True to migrate");
  EXPECT_EQ(migrate_text("timeout: 5\n"),
            "1:1: namespace.net is absent, which the platform reads as false: it would share the host's "
            "network with the sandbox; nsbox always gives a sandbox its own network namespace, and what "
            "it may reach is the profile's network section (mode none, or egress through nsbox's proxy "
            "with an allow list): set net: True to migrate");
  EXPECT_EQ(migrate_text("namespace: {user: True, net: True, pid: True, ipc: True, uts: True, "
                         "cgroup: True, mnt: True}\n"),
            "1:83: unknown key 'mnt' in namespace (did you mean 'net'?)");
  EXPECT_EQ(migrate_text("namespace: {user: yes, net: True, pid: True, ipc: True, uts: True, cgroup: True}\n"),
            "1:19: namespace.user: expected true or false, got \"yes\"");
}

TEST(OpenJiuwen, OtherKeys) {
  std::string base = kMinimalConfig;
  EXPECT_EQ(migrate_text(base + "timeout: 10s\n"), "4:10: timeout: expected a number in 0..86400, got \"10s\"");
  EXPECT_EQ(migrate_text(base + "timeout: 0\n"), "(no error)");
  EXPECT_EQ(migrate_text(base + "environment: {LD_PRELOAD: /x.so}\n"),
            "4:15: environment.LD_PRELOAD: not allowed: it would load a library into every program "
            "of the "
            "sandbox, the language runners included; put libraries into the rootfs instead");
  EXPECT_EQ(migrate_text(base + "options: ['--proc', '/proc', '--dev', '/dev', '--die-with-parent']\n"), "(no error)");
  EXPECT_EQ(migrate_text(base + "options: ['--share-net']\n"),
            "4:11: options[0]: bwrap option \"--share-net\" has no nsbox equivalent: only options that "
            "repeat what nsbox always does are accepted (--proc /proc, --dev /dev, --tmpfs /tmp, "
            "--unshare-*, --die-with-parent, --new-session, --cap-drop ALL, --clearenv)");
  EXPECT_EQ(migrate_text(base + "options: ['--proc', '/hostproc']\n"),
            "4:21: options[1]: nsbox always has --proc /proc, got the quoted string \"/hostproc\"");
  EXPECT_EQ(migrate_text(base + "options: ['--proc']\n"), "4:11: options[0]: bwrap option --proc needs an argument");
  EXPECT_EQ(migrate_text(base + "sandbox: {type: firejail, path: firejail}\n"),
            "4:17: sandbox.type: expected bubblewrap (the only type the platform has), got \"firejail\"");
  EXPECT_EQ(migrate_text(base + "interpreter: {python_path: python3, node_path: node}\n"), "(no error)");
  EXPECT_EQ(migrate_text(base + "mounts: []\n"), "4:1: unknown top-level key 'mounts' (did you mean 'mount'?)");
  EXPECT_EQ(migrate_text(base + "seccomp: {allow: {x86_64: [read, nosuchcall]}}\n"),
            "4:34: seccomp.allow.x86_64[1]: unknown system call \"nosuchcall\" on x86_64");
  EXPECT_EQ(migrate_text(base + "seccomp: {allow: {aarch64: [open]}}\n"),
            "4:29: seccomp.allow.aarch64[0]: unknown system call \"open\" on aarch64");
  EXPECT_EQ(migrate_text(""), "1:1: the file is empty: expected a map of keys");
}

// ---- docs ----

TEST(ProfilesDoc, NamesEveryKeyTheLoaderKnows) {
  std::string doc = read_text(kSource + "/docs/PROFILES.md");
  ASSERT_FALSE(doc.empty()) << "docs/PROFILES.md missing";
  for (const auto& key : profile_schema_keys()) {
    EXPECT_NE(doc.find("`" + key + "`"), std::string::npos) << "docs/PROFILES.md does not name `" << key << "`";
  }
  for (const auto& key : openjiuwen_schema_keys()) {
    EXPECT_NE(doc.find("`" + key + "`"), std::string::npos)
        << "docs/PROFILES.md does not name the sandbox_config.yaml key `" << key << "`";
  }
}

TEST(ProfilesDoc, SchemaListsNestedKeys) {
  const auto& keys = profile_schema_keys();
  for (const char* k :
       {"name", "extends", "limits.memory", "filesystem.mounts[].target", "filesystem.workspace.max_artifact_bytes",
        "seccomp.allow", "network.mode", "network.allow[].cidr", "network.max_bytes", "user.uid"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  }
}

}  // namespace
}  // namespace nsbox
