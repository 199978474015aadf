// The rootfs holds what agents' code imports.
#include "fixture.h"

namespace nsbox::testing {
namespace {

TEST(Runtimes, PythonImportsTheAgentLibraries) {
  std::string out = python(
      "import json, asyncio, decimal, uuid, numpy, requests, sys\n"
      "print(sys.version_info[:2] >= (3, 11), numpy.array([1, 2, 3]).sum(), uuid.uuid4().version)\n"
      "print(json.dumps({'d': str(decimal.Decimal('1.10') + decimal.Decimal('2.20'))}))\n"
      "async def main(): return 42\n"
      "print(asyncio.run(main()))\n");
  EXPECT_EQ(out, "True 6 4\n{\"d\": \"3.30\"}\n42\n");
}

TEST(Runtimes, NodeRequiresLodashAndDayjs) {
  Result r = run({"node", "-e",
                  "const _ = require('lodash'); const dayjs = require('dayjs');"
                  "const id = crypto.randomUUID();"
                  "console.log(process.versions.node.split('.')[0] >= 20, _.sum([1, 2, 3]),"
                  " dayjs('2024-01-02').format('YYYY/MM/DD'), /^[0-9a-f-]{36}$/.test(id));"});
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "true 6 2024/01/02 true\n");
}

TEST(Runtimes, ShellAndCoreutilsForAgentsShellCommands) {
  Result r = run({"sh", "-c", "echo a b | tr ' ' '\\n' | sort -r | head -n 1; ls / >/dev/null && echo ls"});
  ASSERT_EQ(r.status, RunStatus::kOk) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "b\nls\n");
}

TEST(Runtimes, PythonSubprocessAndThreadsWork) {
  std::string out = python(
      "import subprocess, threading\n"
      "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
      "print(subprocess.run('echo $((6*7))', shell=True, capture_output=True, text=True).stdout.strip())\n");
  EXPECT_EQ(out, "42\n");
}

}  // namespace
}  // namespace nsbox::testing
