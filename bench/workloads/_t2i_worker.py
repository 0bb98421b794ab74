"""Run a pyperformance benchmark script for the T2I group (bench/harness/run.py):

    BENCH_T2I_LAYOUT=k:xxxx python _t2i_worker.py \
        .../bm_float/run_benchmark.py --worker --loops 1 ...

- The cyclic garbage collector is disabled: the free-threaded collector
  decides from the process's RSS whether to run (gc_should_collect_mem_usage()
  reads VmRSS from /proc/self/status), so the number of collections, and with
  it the instruction count, changes between identical runs (float: 2.6 % per
  loop).  Objects are still freed by reference counting; the collector's
  cost (which the BRC patches change by a few instructions per thread and
  collection) is in the wall-time T2 and PP groups.
- BENCH_T2I_LAYOUT=k:<padding> selects a memory layout: the padding makes
  the environment longer, and k more objects of every small size are put on
  the heap before the benchmark is compiled.  Instruction counts depend on
  the layout (e.g. two hot names colliding in the type attribute cache, whose
  index mixes the name's address); run.py measures several layouts and
  compares the smallest counts.
"""

import gc
import os
import runpy
import sys

gc.disable()
_k = int((os.environ.get("BENCH_T2I_LAYOUT") or "0").split(":")[0])
_layout = [bytes(n) for n in range(600) for _ in range(_k)]
script = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(script)
runpy.run_path(script, run_name="__main__")
