#!/usr/bin/env python3
"""tests/scripts/report_browser.py DIR --panels a,b,... [--screenshot PNG] — a run report in a real browser.

Opens DIR/report.html (scripts/run_report.py's page of a `train --run-dir DIR` run) in
headless Chromium, offline, driven over the DevTools protocol on a pipe (fd 3 / 4,
--remote-debugging-pipe: only the standard library), and checks:

  - the page loads with no console error, no exception, no failed load;
  - no request leaves the file (every request the page makes is counted: only its own
    file:// URL may appear);
  - each panel named in --panels is on the page (section#<id>), and no other;
  - the numbers it shows equal the run's files: every step's loss (metrics.jsonl), every
    group's elements per step on every rank (rank-<R>.json), every rank's measured peak
    memory (rank-<R>.json);
  - the page reads without scripts too: loaded again with JavaScript off, the same tables.

--screenshot writes the page's picture (nothing compares pixels). Prints "ok: ..." and
exits 0, or one line per problem and exits 1. Without Chromium it prints "SKIPPED: ..."
(scripts/setup.sh installs Debian's chromium; ctest counts the test as skipped, loudly).

Test: ctest -L report   (tests/cmake/report_tests.cmake)
"""
import argparse
import base64
import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    """Headless Chromium, one page, over --remote-debugging-pipe (NUL-terminated JSON)."""

    def __init__(self, binary, width=1200, height=900):
        self.profile = tempfile.mkdtemp(prefix="report_browser_")
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        # fd 3: what the browser reads, fd 4: what it writes (copied above 9 first, so that
        # neither dup2 overwrites the other's source).
        high_r, high_w = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
        os.close(to_child_r)
        os.close(from_child_w)
        to_child_r, from_child_w = high_r, high_w

        def fds():
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--disable-sync", "--disable-component-update", "--user-data-dir=" + self.profile,
             "--window-size=%d,%d" % (width, height), "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.buffer, self.next_id, self.events, self.session = b"", 0, [], None
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(domain + ".enable")

    def send(self, method, params=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self.to_child, json.dumps(msg).encode() + b"\0")
        return self.next_id

    def read(self, deadline):
        while b"\0" not in self.buffer:
            if time.time() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe (did it start? try: chromium --headless --version)")
            self.buffer += chunk
        msg, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, timeout=60):
        want = self.send(method, params)
        deadline = time.time() + timeout
        while True:
            msg = self.read(deadline)
            if msg.get("id") == want:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method, timeout=60):
        deadline = time.time() + timeout
        for i, msg in enumerate(self.events):
            if msg.get("method") == method:
                return self.events.pop(i)
        while True:
            msg = self.read(deadline)
            self.events.append(msg)
            if msg.get("method") == method:
                return msg

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return r["result"].get("value")

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:  # noqa: BLE001 (closing: whatever happens, the process goes)
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def load(b, url, scripts):
    b.call("Emulation.setScriptExecutionDisabled", {"value": not scripts})
    b.events.clear()
    b.call("Page.navigate", {"url": url})
    b.wait_for("Page.loadEventFired")
    time.sleep(0.3)  # late console messages
    b.call("Runtime.evaluate", {"expression": "1"})  # flush the events so far


def problems_of_events(b, url):
    out = []
    for m in b.events:
        p = m.get("params", {})
        method = m.get("method")
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console error: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif method == "Runtime.exceptionThrown":
            out.append("exception: " + p["exceptionDetails"].get("text", "") + " " +
                       str(p["exceptionDetails"].get("exception", {}).get("description", "")))
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            out.append("browser log error: " + p["entry"].get("text", "") + " " + p["entry"].get("url", ""))
        elif method == "Network.requestWillBeSent" and p["request"]["url"] != url:
            out.append("a request outside the file: " + p["request"]["url"])
        elif method == "Network.loadingFailed":
            out.append("a load failed: " + p.get("errorText", ""))
    return out


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--panels", required=True, help="the panels the page must show, comma-separated (and no others)")
    ap.add_argument("--screenshot")
    ap.add_argument("--reference", help="the run directory the report was drawn against: its largest relative "
                                        "difference is checked (recomputed from both metrics files, and below 1e-4)")
    a = ap.parse_args(argv)
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not binary:
        print("SKIPPED: no chromium on PATH: the report's browser test did not run "
              "(scripts/setup.sh installs Debian's chromium; apt-get install chromium)")
        return 0
    page = os.path.abspath(os.path.join(a.dir, "report.html"))
    url = "file://" + page
    problems = []
    b = Browser(binary)
    try:
        load(b, url, scripts=True)
        problems += problems_of_events(b, url)
        shown = b.evaluate("Array.from(document.querySelectorAll('section.panel')).map(s => s.id)")
        want = a.panels.split(",")
        if sorted(shown) != sorted(want):
            problems.append("panels shown %s, expected %s" % (shown, want))
        # Every step's loss, as the page shows it, against metrics.jsonl.
        losses = b.evaluate("Object.fromEntries(Array.from(document.querySelectorAll('.loss'))"
                            ".map(e => [e.dataset.step, e.textContent]))")
        metrics = [json.loads(line) for line in open(os.path.join(a.dir, "metrics.jsonl")) if line.strip()]
        for m in metrics:
            got = losses.get(str(m["step"]))
            if got is None or float(got) != m["loss"]:
                problems.append("step %d: the page shows loss %s, metrics.jsonl has %r" % (m["step"], got, m["loss"]))
        if a.reference:  # the equivalence contract, seen: the page's figure, recomputed, and small (fp32)
            ref = {m["step"]: m for m in (json.loads(line) for line in open(os.path.join(a.reference, "metrics.jsonl")))}
            rel = lambda x, y: abs(x - y) / max(abs(y), 1e-300)
            worst = max(max(rel(m["loss"], ref[m["step"]]["loss"]), rel(m["grad_norm"], ref[m["step"]]["grad_norm"]))
                        for m in metrics)
            shown_worst = b.evaluate("(document.querySelector('.maxdiff') || {}).textContent")
            if shown_worst is None or abs(float(shown_worst) - worst) > 1e-3 * worst + 1e-300:
                problems.append("the page shows the largest relative difference %s, the files give %.3g" % (shown_worst, worst))
            if worst > 1e-4:
                problems.append("the run and its reference differ by %.3g (relative) > 1e-4" % worst)
        # Every group's elements per step and every rank's peak, against rank-<R>.json.
        elements = b.evaluate("Array.from(document.querySelectorAll('.elements')).map(e => "
                              "[e.dataset.group, +e.dataset.rank, e.dataset.kind, e.textContent])")
        shown_elements = {(g, r, k): float(t.replace(",", "")) for g, r, k, t in elements}
        peaks = b.evaluate("Object.fromEntries(Array.from(document.querySelectorAll('.peak'))"
                           ".map(e => [e.dataset.rank, e.textContent]))")
        checked = 0
        for path in glob.glob(os.path.join(a.dir, "rank-*.json")):
            doc = json.load(open(path))
            r, steps = doc["rank"], max(doc["steps"], 1)
            for g in doc["groups"]:
                for kind, n in g["ledger"].items():
                    got = shown_elements.get((g["name"], r, kind))
                    if got is None or abs(got - n["elements"] / steps) > 1e-3 * max(1, n["elements"] / steps):
                        problems.append("rank %d group %s %s: the page shows %s elements/step, %s has %d over %d steps"
                                        % (r, g["name"], kind, got, os.path.basename(path), n["elements"], steps))
                    checked += 1
            if str(r) not in peaks or int(peaks[str(r)].replace(",", "")) != doc["peak_mem_bytes"]:
                problems.append("rank %d: the page shows peak %s, %s has %d"
                                % (r, peaks.get(str(r)), os.path.basename(path), doc["peak_mem_bytes"]))
        if checked == 0 and "ledger" in want:
            problems.append("no ledger line to check: no rank-<R>.json in " + a.dir)
        if a.screenshot:
            # The page as a reader first sees it, folded tables aside: the narration closed
            # (as it loads), at most 3,200 pixels, half size.
            height = min(b.evaluate("document.documentElement.scrollHeight"), 3200)
            b.call("Emulation.setDeviceMetricsOverride",
                   {"width": 1200, "height": int(height), "deviceScaleFactor": 1, "mobile": False})
            shot = b.call("Page.captureScreenshot", {"format": "png", "clip": {  # half size: a picture for the docs
                "x": 0, "y": 0, "width": 1200, "height": int(height), "scale": 0.5}})
            with open(a.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        # Without scripts: the same panels and tables (nothing is only a picture).
        tables = b.evaluate("document.querySelectorAll('table').length")
        load(b, url, scripts=False)
        problems += problems_of_events(b, url)
        if b.evaluate("document.querySelectorAll('table').length") != tables:
            problems.append("with JavaScript off the page has another number of tables")
    finally:
        b.close()
    for p in problems:
        print("report_browser: " + p)
    if problems:
        return 1
    print("ok: %s in headless %s: panels %s; %d losses, %d ledger lines, %d peaks equal the run's files; "
          "no console error, no request outside the file%s"
          % (page, os.path.basename(binary), ",".join(shown), len(metrics), checked, len(peaks),
             "; screenshot " + a.screenshot if a.screenshot else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
