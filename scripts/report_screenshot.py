"""Screenshot one entry of a `snakemake --report` HTML file as a reader sees it, in headless
Chromium at a laptop's width: the report opened with that entry (a table's .html, a figure's
.png) shown, as a click on it in the menu would.

    python scripts/report_screenshot.py results/report.html table3.html table3.png [--width 1400]
    python scripts/report_screenshot.py results/report.html - landing.png   # the front page

Needs `chromium` (apt-get install -y chromium).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHOW = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const wanted = %s;
  if (wanted === null) return;
  const path = Object.keys(results).find((p) => p.split("/").pop() === wanted);
  if (path === undefined) { document.title = "fedkd: no entry " + wanted; return; }
  app.setView({content: "html", contentPath: results[path].data_uri, resultPath: path});
}, 300));
</script>
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("report", type=Path)
    p.add_argument("entry", help="file name of the entry to show (e.g. table3.html); - for none")
    p.add_argument("out", type=Path, help="the PNG to write")
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--height", type=int, default=900)
    args = p.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not installed (apt-get install -y chromium)")
    html = args.report.read_text(errors="replace")
    wanted = json.dumps(None if args.entry == "-" else args.entry)
    head, body_end, tail = html.rpartition("</body>")  # the last: scripts hold the string too
    html = head + SHOW % wanted + body_end + tail
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html)
        cmd = [
            chromium, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={tmp}/profile",
            f"--window-size={args.width},{args.height}", "--virtual-time-budget=5000",
            f"--screenshot={args.out.resolve()}", page.as_uri(),
        ]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True, timeout=180)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
