// collect_artifacts on a plain directory: what comes back, in memory or
// copied, and what is refused.
#include "nsbox/workspace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "nsbox/digest.h"
#include "nsbox/unique_fd.h"

namespace nsbox {
namespace {

std::string sha256_of(const std::string& data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex();
}

void write_file(const std::filesystem::path& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class Artifacts : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "nsbox-ws-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    std::filesystem::create_directories(root_ / "ws" / "out" / "sub");
    write_file(root_ / "ws" / "out" / "a.txt", "hello");
    binary_ = std::string("\0\x01\xff tail", 7);
    write_file(root_ / "ws" / "out" / "sub" / "b.bin", binary_);
    std::filesystem::create_symlink("/etc/passwd", root_ / "ws" / "out" / "link");
    dir_.reset(::open((root_ / "ws").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::filesystem::path root_;
  std::string binary_;
  UniqueFd dir_;
};

TEST_F(Artifacts, KeptInMemoryWithTheirDigestsAndNothingCopied) {
  WorkspaceSpec spec;
  spec.keep_content = true;
  ArtifactReport report = collect_artifacts(spec, dir_.get());
  ASSERT_EQ(report.artifacts.size(), 2u);
  EXPECT_EQ(report.artifacts[0].name, "a.txt");
  EXPECT_EQ(report.artifacts[0].content, "hello");
  EXPECT_EQ(report.artifacts[0].sha256, sha256_of("hello"));
  EXPECT_EQ(report.artifacts[1].name, "sub/b.bin");
  EXPECT_EQ(report.artifacts[1].size, binary_.size());
  EXPECT_EQ(report.artifacts[1].content, binary_);
  EXPECT_EQ(report.artifacts[1].sha256, sha256_of(binary_));
  ASSERT_EQ(report.refused.size(), 1u);
  EXPECT_EQ(report.refused[0], "link: a symlink, not returned");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(root_), {}), 1) << "something besides ws/ was made";
}

TEST_F(Artifacts, CopiedWithoutContentUnlessAsked) {
  WorkspaceSpec spec;
  spec.artifacts_dir = (root_ / "copy").string();
  ArtifactReport report = collect_artifacts(spec, dir_.get());
  ASSERT_EQ(report.artifacts.size(), 2u);
  EXPECT_TRUE(report.artifacts[0].content.empty());
  EXPECT_TRUE(report.artifacts[1].content.empty());
  EXPECT_EQ(read_file(root_ / "copy" / "a.txt"), "hello");
  EXPECT_EQ(read_file(root_ / "copy" / "sub" / "b.bin"), binary_);
}

TEST_F(Artifacts, AnEmptyFileIsAnArtifactWithTheEmptyDigest) {
  write_file(root_ / "ws" / "out" / "empty", "");
  WorkspaceSpec spec;
  spec.keep_content = true;
  ArtifactReport report = collect_artifacts(spec, dir_.get());
  ASSERT_EQ(report.artifacts.size(), 3u);
  EXPECT_EQ(report.artifacts[1].name, "empty");
  EXPECT_EQ(report.artifacts[1].size, 0u);
  EXPECT_TRUE(report.artifacts[1].content.empty());
  EXPECT_EQ(report.artifacts[1].sha256, sha256_of(""));
}

TEST_F(Artifacts, OverTheByteCapIsRefusedAndNotKept) {
  WorkspaceSpec spec;
  spec.keep_content = true;
  spec.max_artifact_bytes = 6;  // a.txt (5) fits, sub/b.bin (7) does not
  ArtifactReport report = collect_artifacts(spec, dir_.get());
  ASSERT_EQ(report.artifacts.size(), 1u);
  EXPECT_EQ(report.artifacts[0].content, "hello");
  ASSERT_EQ(report.refused.size(), 2u);
  EXPECT_NE(report.refused[1].find("sub/b.bin (7 bytes): over the cap of 6 bytes"), std::string::npos)
      << report.refused[1];
}

TEST_F(Artifacts, DirectoriesWithoutAnArtifactAreNotCopied) {
  std::filesystem::create_directories(root_ / "ws" / "out" / "empty" / "deeper");
  std::filesystem::create_directories(root_ / "ws" / "out" / "refused");
  write_file(root_ / "ws" / "out" / "refused" / "big", std::string(100, 'x'));
  WorkspaceSpec spec;
  spec.artifacts_dir = (root_ / "copy").string();
  spec.max_artifact_bytes = 20;
  ArtifactReport report = collect_artifacts(spec, dir_.get());
  ASSERT_EQ(report.artifacts.size(), 2u);
  EXPECT_EQ(read_file(root_ / "copy" / "sub" / "b.bin"), binary_) << "a directory with an artifact is made";
  EXPECT_FALSE(std::filesystem::exists(root_ / "copy" / "empty")) << "the run's empty directories stay in the run";
  EXPECT_FALSE(std::filesystem::exists(root_ / "copy" / "refused"));
}

TEST_F(Artifacts, ATreeOfEmptyEntriesCostsTheCollectorABoundedWalkAndABoundedReport) {
  // 64 artifacts allowed: 64 + 4096 entries are looked at, 64 refusals named.
  const auto many = root_ / "ws" / "out" / "many";
  std::filesystem::create_directories(many);
  for (int i = 0; i < 5000; ++i) write_file(many / ("f" + std::to_string(100000 + i)), "");
  for (int i = 0; i < 100; ++i) std::filesystem::create_directory(root_ / "ws" / "out" / ("d" + std::to_string(i)));
  WorkspaceSpec spec;
  spec.artifacts_dir = (root_ / "copy").string();
  ArtifactReport report = collect_artifacts(spec, dir_.get());
  EXPECT_EQ(report.artifacts.size(), spec.max_artifacts);
  ASSERT_EQ(report.refused.size(), 64u + 2u) << "64 named, one count of the rest, one for what was not looked at";
  EXPECT_NE(report.refused[64].find("more not returned, not listed"), std::string::npos) << report.refused[64];
  EXPECT_EQ(report.refused[65], "out/ holds more than 4160 entries: the rest were not looked at");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(root_ / "copy"), {}), 2)
      << "a.txt and many/: no empty d* directory, and sub/ was not reached";
}

TEST_F(Artifacts, NamesWithControlCharactersAreRefusedAndShownWithoutThem) {
  write_file(root_ / "ws" / "out" / "evil\n\x1b[31mname", "x");
  WorkspaceSpec spec;
  spec.artifacts_dir = (root_ / "copy").string();
  ArtifactReport report = collect_artifacts(spec, dir_.get());
  ASSERT_EQ(report.artifacts.size(), 2u);
  ASSERT_EQ(report.refused.size(), 2u);
  EXPECT_EQ(report.refused[0], "evil??[31mname: a name with control characters, not returned");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(root_ / "copy"), {}), 2) << "a.txt and sub/ only";
}

// Names become JSON strings: bytes that are not UTF-8 would each become
// U+FFFD there, and report-\xff.csv, report-\xfe.csv and a real
// report-U+FFFD.csv would all come back as one name.
TEST_F(Artifacts, NamesThatAreNotUtf8AreRefusedSoTwoFilesNeverShareAName) {
  const auto out = root_ / "ws" / "out";
  for (const char* bad : {"report-\xff.csv", "report-\xfe.csv", "overlong-\xc0\xaf", "surrogate-\xed\xa0\x80",
                          "past-max-\xf4\x90\x80\x80", "cut-\xe2\x82", "nel-\xc2\x85"})
    write_file(out / bad, "x");
  for (const char* good : {"report-\xef\xbf\xbd.csv", "caf\xc3\xa9.txt", "emoji-\xf0\x9f\x93\x88.png"})
    write_file(out / good, "y");
  WorkspaceSpec spec;
  spec.artifacts_dir = (root_ / "copy").string();
  ArtifactReport report = collect_artifacts(spec, dir_.get());
  std::set<std::string> names;
  for (const auto& a : report.artifacts) names.insert(a.name);
  for (const char* good : {"report-\xef\xbf\xbd.csv", "caf\xc3\xa9.txt", "emoji-\xf0\x9f\x93\x88.png"})
    EXPECT_EQ(names.count(good), 1u) << good;
  EXPECT_EQ(report.artifacts.size(), 2u + 3u);
  size_t not_utf8 = 0, control = 0;
  for (const auto& r : report.refused) {
    not_utf8 += r.find(": a name that is not valid UTF-8, not returned") != std::string::npos;
    control += r.find(": a name with control characters, not returned") != std::string::npos;
  }
  EXPECT_EQ(not_utf8, 6u);
  EXPECT_EQ(control, 1u) << "U+0085 is a C1 control";
  // Shown so that two refused names never read alike.
  std::set<std::string> refused(report.refused.begin(), report.refused.end());
  EXPECT_EQ(refused.count("report-\\xFF.csv: a name that is not valid UTF-8, not returned"), 1u);
  EXPECT_EQ(refused.count("report-\\xFE.csv: a name that is not valid UTF-8, not returned"), 1u);
  EXPECT_EQ(refused.count("nel-?: a name with control characters, not returned"), 1u);
}

// Not as root a workspace is plain directories, and the run may nest them
// as deep as it likes and make them unwritable or unsearchable: removing
// it must still leave nothing (as root, a tmpfs goes with its unmount).
TEST(WorkspaceRemoval, ReachesEveryDepthAndWhatTheRunMadeReadOnly) {
  std::string pattern = (std::filesystem::temp_directory_path() / "nsbox-ws-removal-XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const std::string tmpdir = pattern;
  ASSERT_EQ(::chmod(tmpdir.c_str(), 0777), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0))
      ::_exit(10);
    ::setenv("TMPDIR", tmpdir.c_str(), 1);
    try {
      Workspace ws(WorkspaceSpec{}, ::getuid(), ::getgid());
      // What a run leaves: 300 nested directories with a file at the
      // bottom, one made read-only with a file in it, one with no access.
      UniqueFd at(::open(ws.host_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      for (int i = 0; i < 300 && at; ++i) {
        if (::mkdirat(at.get(), "d", 0755) != 0) ::_exit(11);
        at.reset(::openat(at.get(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      }
      if (!at || ::close(::openat(at.get(), "bottom", O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) != 0) ::_exit(12);
      const std::string ro = ws.host_path() + "/out/ro", closed = ws.host_path() + "/out/closed";
      if (::mkdir(ro.c_str(), 0755) != 0 || ::close(::open((ro + "/f").c_str(), O_WRONLY | O_CREAT, 0600)) != 0 ||
          ::chmod(ro.c_str(), 0500) != 0 || ::mkdir(closed.c_str(), 0755) != 0 ||
          ::mkdir((closed + "/inner").c_str(), 0755) != 0 || ::chmod(closed.c_str(), 0) != 0)
        ::_exit(13);
    } catch (const std::exception&) {
      ::_exit(14);
    }
    ::_exit(std::filesystem::is_empty(tmpdir) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::error_code ignored;
  std::filesystem::remove_all(tmpdir, ignored);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: something of the workspace was left; more: the step that failed";
}

}  // namespace
}  // namespace nsbox
