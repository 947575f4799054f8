#!/usr/bin/env python3
"""tests/scripts/assignment_wrong_fills.py [WORK_DIR] — the grader tells right from wrong
(ctest -L assignments_build; slow: it builds a course copy twice, the grader's build).

scripts/assignment make all, and grading that copy (every stub in, built as the grader
builds it) must fail every task for its missing code ("not implemented" or "blocked by");
then solve (the reference back), then a deliberately wrong
line in several tasks (WRONG below), each a mistake a student makes: the average forgotten, f without its
all-reduce, the log-sum-exp merge without the max shift, HSDP's slice averaged over its shard
group (the ranks holding the other slices) instead of its replicas, Ulysses' output left in the
gathered (rank) order instead of put back, one warm-up forward short, DualPipeV's waiting
W's run newest first (a stack, not a queue), the
recomputed inputs cut from the graph, the balancing statistics' gradient not summed over
cp, eps outside the square root, the fp8 amax kept local instead of max-reduced. Grading the copy must
fail each of those tasks with a number that differs (not "not implemented"), and pass
two tasks left right (their tests share no code with the wrong ones).
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "scripts" / "assignment"

# task -> (file, the reference text inside the task's region, the wrong text)
WRONG = {
    "dp.naive_all_reduce": ("data_parallel/data_parallel.cpp",
                            "group_.all_reduce_async(params_[i].main_grad, ReduceOp::kAvg, carries(",
                            "group_.all_reduce_async(params_[i].main_grad, ReduceOp::kSum, carries("),
    "tp.f_and_g": ("tensor_parallel/tensor_parallel.cpp",
                   "from_saved(ctx).all_reduce(dx, ReduceOp::kSum, carries(",
                   "(void)carries(("),
    "kernels.fp8_amax_sync": ("kernels/fp8.cpp",
                              "group->all_reduce(amax, ReduceOp::kMax, carries(",
                              "(void)group, (void)carries(("),
    "cp.lse_merge": ("context_parallel/context_parallel.cpp",
                     "torch::maximum(lse, lb) + torch::log1p(torch::exp(-(lse - lb).abs()));",
                     "torch::log(torch::exp(lse) + torch::exp(lb));"),
    "cp.ulysses": ("context_parallel/ulysses.cpp",
                   "return heads_to_sequence(o_h.index_select(2, from).contiguous(), *group);",
                   "return heads_to_sequence(o_h.contiguous(), *group);"),
    "zero.stage1": ("zero/zero1.cpp",
                    "flat_grad_.narrow(0, bucket.offset, bucket.padded), ReduceOp::kAvg, carries(",
                    "flat_grad_.narrow(0, bucket.offset, bucket.padded), ReduceOp::kSum, carries("),
    "zero.hsdp": ("zero/zero_shard.cpp",
                  "replicas.all_reduce(grad, ReduceOp::kAvg, carries(",
                  "groups.shard().all_reduce(grad, ReduceOp::kAvg, carries("),
    "pp.one_f_one_b": ("pipeline_parallel/schedules.cpp",
                       "for (; f < size_t(warmup) && f < fwd.size(); ++f)",
                       "for (; f + 1 < size_t(warmup) && f < fwd.size(); ++f)"),
    "pp.dualpipev": ("pipeline_parallel/dualpipev.cpp",
                     "out.push_back(waiting.front());\n    waiting.pop_front();",
                     "out.push_back(waiting.back());\n    waiting.pop_back();"),
    "memory.recompute_layer": ("picotron/recompute.cpp",
                               "leaves.push_back(saved.detach().requires_grad_(saved.requires_grad()));",
                               "leaves.push_back(saved.detach());"),
    "moe.balancing_loss": ("expert_parallel/moe.cpp",
                           "if (ctx->saved_data[\"sum_gradient\"].toBool())",
                           "if (false)"),
    "kernels.rmsnorm_forward": ("kernels/reference.cpp",
                                "torch::rsqrt(xf.pow(2).mean(/*dim=*/-1, /*keepdim=*/true) + eps);",
                                "torch::rsqrt(xf.pow(2).mean(/*dim=*/-1, /*keepdim=*/true)) + eps;"),
}
RIGHT = ["dp.bucketed_all_reduce", "zero.stage3_gather_release"]


def region_text(path, task):
    lines, inside, out = path.read_text().split("\n"), False, []
    for line in lines:
        if line.strip() == f"// BEGIN ASSIGNMENT {task}":
            inside = True
        elif line.strip() == "// END ASSIGNMENT":
            inside = False
        elif inside:
            out.append(line)
    return "\n".join(out)


def main():
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="picotron-wrong-"))
    course = work / "course"
    problems = []
    if not course.exists():
        subprocess.run([str(TOOL), "make", "all", str(course)], check=True, stdout=subprocess.DEVNULL)
        proc = subprocess.run([str(TOOL), "grade", str(course)], capture_output=True, text=True)
        print(proc.stdout[-4000:], proc.stderr[-2000:])
        if not (course / "grade.json").is_file():
            sys.exit("FAILED: grading the copy with every stub wrote no grade.json")
        for r in json.loads((course / "grade.json").read_text())["tasks"]:
            failed = [t for t in r["tests"] if not t["passed"]]
            if r["passed"] or not failed:
                problems.append(f"{r['task']}: passed with its code removed")
            elif not all(t["detail"].startswith(("not implemented", "blocked by")) for t in failed):
                bad = next(t for t in failed if not t["detail"].startswith(("not implemented", "blocked by")))
                problems.append(f"{r['task']}: with every stub in, {bad['name']} failed for another reason: {bad['detail']}")
        if not problems:
            print("every task of the copy with every stub graded 'not implemented'")
    subprocess.run([str(TOOL), "solve", str(course)], check=True, stdout=subprocess.DEVNULL)
    for task, (rel, right, wrong) in WRONG.items():
        path = course / rel
        if region_text(path, task).count(right) != 1:
            sys.exit(f"FAILED: {rel}: the region of {task} no longer holds '{right}' once")
        path.write_text(path.read_text().replace(right, wrong, 1))
        print(f"wrong fill of {task}: {wrong}")
    proc = subprocess.run([str(TOOL), "grade", str(course), *WRONG, *RIGHT], capture_output=True, text=True)
    print(proc.stdout[-6000:], proc.stderr[-2000:])
    grade = {r["task"]: r for r in json.loads((course / "grade.json").read_text())["tasks"]}
    for task in WRONG:
        r = grade[task]
        failed = [t for t in r["tests"] if not t["passed"]]
        if r["passed"]:
            problems.append(f"{task}: the wrong fill passed every test")
        elif any(t["detail"].startswith(("not implemented", "blocked by")) for t in failed):
            problems.append(f"{task}: failed for a missing task, not for the wrong fill")
        else:
            print(f"caught {task}: {len(failed)}/{len(r['tests'])} tests failed, first: {failed[0]['name']}: "
                  f"{failed[0]['detail']}")
    for task in RIGHT:
        if not grade[task]["passed"]:
            problems.append(f"{task}: left right, yet failed")
    if problems:
        print("\n".join(problems))
        print("FAILED")
        return 1
    print(f"WRONG FILLS CAUGHT: {len(WRONG)} of {len(WRONG)}, and {len(RIGHT)} right tasks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
