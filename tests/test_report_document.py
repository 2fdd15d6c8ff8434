"""suite.cluster.report.document: what its sections say, and report.html as a browser renders it."""
import json
import os
import re

import pytest

from helpers.published import FOLDERS
from helpers.report import build, report_cli, system, table_with, tables
from helpers.running import run
from suite.cluster.report import document, projection, sweep_folder


def test_the_network_of_every_run_is_shown(built):
    _, markdown = built
    rows = table_with(markdown, "network (per rank)")
    # Only the 2-process runs recorded a network check; one row each.
    assert [(r["system"], r["run"]) for r in rows] == [(system(2), str(i)) for i in range(5)]
    healthy, fallback = rows[0], rows[1]
    assert (healthy["network (per rank)"], healthy["RDMA"], healthy["verdict"]) == ("IB", "yes", "ok")
    assert healthy["probe busbw (GB/s)"] == "190.250 at 1G" and healthy["expected (GB/s)"] == "185"
    assert fallback["network (per rank)"] == "IB on ranks 0; Socket on ranks 1"
    assert (fallback["RDMA"], fallback["verdict"]) == ("NO", "below expectation")
    assert fallback["profile"] == "test" and fallback["carried by"] == "nccl"


def test_projected_figures_are_labelled(built):
    folder, markdown = built
    section = markdown.split("## Projected beside measured", 1)[1].split("\n## ", 1)[0]
    assert "PROJECTED" in section and "not from runs" in section
    header, _ = tables(section)[0]
    for cell in header:
        assert cell in ("processes", "measured runs", "per-rank batch (the sweep's)") \
            or cell.startswith(("projected", "measured")), cell
    # No table outside that section has a projected column: measured tables stay measured.
    before = markdown.split("## Projected beside measured", 1)[0]
    assert not [cell for header, _ in tables(before) for cell in header if "projected" in cell.lower()]


def test_a_single_process_scale_has_no_allreduce_rows(tmp_path):
    markdown = build(str(tmp_path / "sweep"), allreduce="every scale")
    rows = table_with(markdown, "busbw (GB/s)")
    assert rows and {row["system"] for row in rows} == {system(2)}
    assert f"{system(1)}: one process, so nothing crosses a link" in markdown


def test_the_page_shows_each_block_as_report_md_writes_it(tmp_path):
    doc = [("h1", "Scaling report: x"), ("banner", "TOO FEW RUNS: see [the rules](https://mlcommons.org/)"),
           ("p", "Sweep folder /data/<old> & new; run_stop − run_start"),
           ("code", "T(N) = b / X\nS < 1"), ("table", ["host", "a|b"], [["h<1>", "[l](https://e.org/x)"]])]
    markdown = document.render_markdown(doc)
    assert markdown.startswith("# Scaling report: x\n\n> **WARNING: TOO FEW RUNS: see [the rules]")
    assert "| host | a\\|b |\n|---|---|\n| h<1> | [l](https://e.org/x) |" in markdown
    page = document.render_html(doc, str(tmp_path))
    assert "<title>Scaling report: x</title>" in page and "<h1>Scaling report: x</h1>" in page
    assert ('<div class="banner"><p><strong>WARNING:</strong> TOO FEW RUNS: see '
            '<a href="https://mlcommons.org/">the rules</a></p></div>') in page
    # Text is text: a '<' in a folder or host name is shown, not taken for a tag.
    assert "<p>Sweep folder /data/&lt;old&gt; &amp; new; run_stop − run_start</p>" in page
    assert "<pre><code>T(N) = b / X\nS &lt; 1\n</code></pre>" in page
    assert "<th>a|b</th>" in page and "<td>h&lt;1&gt;</td>" in page
    assert '<td><a href="https://e.org/x">l</a></td>' in page


# ---- report.html in a real browser ----

# Appended to a copy of the page: after load, what the browser made of every image and table.
RENDER_CHECK = """<script>
window.addEventListener("load", function () {
  var images = Array.prototype.map.call(document.images, function (img) {
    return {alt: img.alt, complete: img.complete, width: img.naturalWidth, height: img.naturalHeight};
  });
  var tables = Array.prototype.map.call(document.querySelectorAll("table"), function (table) {
    var cells = table.querySelectorAll("thead th");
    return {header: Array.prototype.map.call(cells, function (th) { return th.textContent; }),
            rows: table.querySelectorAll("tbody tr").length};
  });
  var banners = document.querySelectorAll("div.banner").length;
  var headings = Array.prototype.map.call(document.querySelectorAll("h2"), function (h) {
    return h.textContent;
  });
  var page = document.documentElement;
  var widths = {scroll: page.scrollWidth, client: page.clientWidth, window: window.innerWidth};
  var out = document.createElement("pre");
  out.id = "render-check";
  out.textContent = JSON.stringify({images: images, tables: tables, banners: banners, headings: headings,
                                    widths: widths});
  document.body.appendChild(out);
});
</script>
"""


def chromium():
    """Debian's chromium; CI must have it (scripts/setup.sh installs it), elsewhere its absence skips."""
    import shutil
    found = shutil.which("chromium")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is required in CI to render report.html (scripts/setup.sh installs it)")
    pytest.skip("no chromium on this machine (apt-get install chromium)")


def render(page_path, tmp_path, width=1400):
    """What headless chromium saw once the page loaded in a window `width` px wide: {images, tables,
    banners, headings, widths}."""
    import html as htmllib
    with open(page_path) as handle:
        page = handle.read()
    checked = tmp_path / "checked.html"
    checked.write_text(page.replace("</body>", RENDER_CHECK + "</body>"))
    result = run([chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                  f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
                  f"--window-size={width},1000", "--dump-dom",
                  checked.as_uri()], timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="render-check">(.*?)</pre>', result.stdout, re.S)
    assert found, "the page's load handler never ran: " + result.stdout[-2000:]
    return json.loads(htmllib.unescape(found.group(1)))


def test_report_html_renders_in_a_browser(built, tmp_path):
    folder, markdown = built
    out = os.path.join(folder, "report")
    seen = render(os.path.join(out, "report.html"), tmp_path)
    pngs = sorted(name for name in os.listdir(out) if name.endswith(".png"))
    assert len(seen["images"]) == len(pngs) == 8
    for image in seen["images"]:
        assert image["complete"] and image["width"] >= 600 and image["height"] >= 350, image
    # Every table of report.md is in the page, in order, with its header and its rows.
    assert [(t["header"], t["rows"]) for t in seen["tables"]] == \
        [(header, len(rows)) for header, rows in tables(markdown)]
    assert seen["banners"] == len(projection.banners(sweep_folder.load_sweep(folder))) == 1
    # The comparison: the sweep's two scales and the published folder in one split table, the sweep's
    # 1 -> 2 factored, and the split's plot drawn.
    results, = [t for t in seen["tables"] if "olympic mean (min)" in t["header"]]
    split, = [t for t in seen["tables"] if "training samples/s" in t["header"]]
    assert results["rows"] == split["rows"] == 3 and "GPU-h per result" in results["header"]
    factors, = [t for t in seen["tables"] if "throughput ×" in t["header"]]
    assert factors["rows"] == 1
    assert "Time to train split, resnet" in [image["alt"] for image in seen["images"]]


def test_the_browser_check_sees_a_broken_image(built, tmp_path):
    folder, _ = built
    with open(os.path.join(folder, "report", "report.html")) as handle:
        page = handle.read()
    broken = tmp_path / "broken.html"
    broken.write_text(page.replace('src="data:image/png;base64,', 'src="data:image/png;base64,AAAA', 1))
    seen = render(str(broken), tmp_path)
    assert [image["width"] for image in seen["images"]].count(0) == 1


def test_a_compare_report_of_the_published_folders_fits_1280_px(tmp_path):
    out = tmp_path / "published"
    result = report_cli("--compare", *(folder for folder, _, _ in FOLDERS), "--out", str(out))
    assert result.returncode == 0, result.stderr
    seen = render(str(out / "report.html"), tmp_path, width=1280)
    # No horizontal scroll bar: the page is no wider than the window.
    assert seen["widths"]["window"] == 1280
    assert seen["widths"]["scroll"] <= seen["widths"]["client"], seen["widths"]
    assert seen["headings"][0] == "Headline"
    alts = sorted(image["alt"] for image in seen["images"])
    assert alts == ["Speed-up against GPUs, bert", "Speed-up against GPUs, resnet"]
    assert all(image["complete"] and image["width"] >= 600 for image in seen["images"])
