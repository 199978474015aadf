#include "nsbox/userns.h"

#include <unistd.h>

#include <map>

#include <gtest/gtest.h>

namespace nsbox {
namespace {

TEST(SubId, FindsTheUsersFirstRange) {
  unsigned long start = 0;
  const std::string file = "alice:100000:65536\nnsbox:300000:65536\nnsbox:900000:10\n";
  ASSERT_TRUE(find_subid_start(file, "nsbox", &start));
  EXPECT_EQ(start, 300000u);
  EXPECT_FALSE(find_subid_start(file, "bob", &start));
}

TEST(SubId, IgnoresMalformedAndZeroStarts) {
  unsigned long start = 0;
  EXPECT_FALSE(find_subid_start("nsbox:abc:10\nnsbox\nnsbox:0:5\n", "nsbox", &start));
}

TEST(UserNsQuotas, BoundInotifyByTheLimitsAndAllowNoFanotifyNorNestedUserNamespace) {
  std::map<std::string, uint64_t> quotas;
  for (const auto& q : user_ns_quotas(3, 500)) EXPECT_TRUE(quotas.emplace(q.name, q.value).second) << q.name;
  EXPECT_EQ(quotas, (std::map<std::string, uint64_t>{{"max_inotify_instances", 3},
                                                     {"max_inotify_watches", 500},
                                                     {"max_fanotify_groups", 0},
                                                     {"max_fanotify_marks", 0},
                                                     {"max_user_namespaces", 0}}));
}

TEST(UserNsQuotas, NoneToWriteTouchesNothing) {
  const char* failed = "unset";
  EXPECT_EQ(write_user_ns_quotas(nullptr, 0, &failed), 0);
  EXPECT_STREQ(failed, "unset");
}

TEST(IdMap, SingleLine) { EXPECT_EQ(id_map_line(65534, 1000), "65534 1000 1\n"); }

TEST(HostIds, NeverHostRoot) {
  HostIds ids = choose_host_ids();
  EXPECT_NE(ids.uid, 0u);
  EXPECT_NE(ids.gid, 0u);
  if (::geteuid() != 0) {
    EXPECT_EQ(ids.uid, ::geteuid());
  }
}

}  // namespace
}  // namespace nsbox
