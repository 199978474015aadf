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

// The strict allow list (profiles/strict.yaml) is built from what these
// workloads need: each must run under it with no call denied.
Result run_strict(std::vector<std::string> argv) {
  RunSpec spec = capture_spec(std::move(argv));
  spec.seccomp = SeccompChoice{.kind = SeccompChoice::kStrict, .allow = {}};
  return run_with(spec);
}

TEST(Runtimes, TheStrictPolicyRunsPythonWithNumpyAsyncioThreadsAndSubprocess) {
  Result r =
      run_strict({"python3", "-c",
                  "import json, asyncio, decimal, uuid, numpy, requests, subprocess, threading\n"
                  "from concurrent.futures import ThreadPoolExecutor\n"
                  "with ThreadPoolExecutor(4) as pool: squares = sum(pool.map(lambda x: x * x, range(10)))\n"
                  "async def main():\n"
                  "    p = await asyncio.create_subprocess_exec('echo', 'async', stdout=asyncio.subprocess.PIPE)\n"
                  "    out, _ = await p.communicate()\n"
                  "    await asyncio.sleep(0.01)\n"
                  "    return out.decode().strip()\n"
                  "sh = subprocess.run('echo $((6*7))', shell=True, capture_output=True, text=True).stdout.strip()\n"
                  "open('/tmp/f', 'w').write(json.dumps({'n': int(numpy.arange(4).sum())}))\n"
                  "print(squares, asyncio.run(main()), sh, open('/tmp/f').read(), uuid.uuid4().version)\n"});
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "285 async 42 {\"n\": 6} 4\n");
  EXPECT_TRUE(r.denied_syscalls.empty()) << "the strict list misses a call python needs";
}

TEST(Runtimes, TheStrictPolicyRunsNodeWithWorkersAndChildProcesses) {
  Result r =
      run_strict({"node", "-e",
                  "const _ = require('lodash'), dayjs = require('dayjs'), fs = require('fs');\n"
                  "const { Worker } = require('worker_threads'), { execSync } = require('child_process');\n"
                  "const w = new Worker('require(\"worker_threads\").parentPort.postMessage(6 * 7)', {eval: true});\n"
                  "w.on('message', async m => {\n"
                  "  fs.writeFileSync('/tmp/f', String(_.sum([1, 2, 3])));\n"
                  "  await new Promise(ok => setTimeout(ok, 10));\n"
                  "  console.log(m, execSync('echo child').toString().trim(), fs.readFileSync('/tmp/f', 'utf8'),\n"
                  "              dayjs('2024-01-02').format('YYYY/MM/DD'), crypto.randomUUID().length);\n"
                  "  await w.terminate();\n"
                  "});\n"});
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "42 child 6 2024/01/02 36\n");
  EXPECT_TRUE(r.denied_syscalls.empty()) << "the strict list misses a call node needs";
}

}  // namespace
}  // namespace nsbox::testing
