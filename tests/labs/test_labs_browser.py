"""The rendered labs in a real browser, offline: every lab's HTML page (``fpsim labs --html``'s
writer, on the notebooks as written) opened in headless Chromium with the network cut off; in
each, every formula laid out as MathML (a box of its own, fractions' numerators above their
denominators, superscripts raised above their bases) and nothing fetched but the page itself.

The static check of the same pages is tests/labs/test_labs_html.py; this one needs Chromium
(Debian's ``chromium``, which .ci/run installs where it can) and skips without it."""

import json
import re
import shutil
import subprocess

import pytest

from fpsim.tools import labs_files

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbconvert")

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium here (Debian: apt-get install chromium)")

# Run in the index page once every lab's frame has loaded: what each frame's layout did with its math.
PROBE = """<script>
window.addEventListener("load", () => {
  const box = e => e.getBoundingClientRect();
  const out = [...document.querySelectorAll("iframe")].map(f => {
    const d = f.contentDocument, maths = [...d.querySelectorAll("math")];
    return {lab: f.getAttribute("src"), maths: maths.length,
      flat: maths.filter(m => box(m).height < 4 || box(m).width < 4).length,
      fracs: [...d.querySelectorAll("mfrac")].filter(x => box(x.children[0]).bottom > box(x.children[1]).top + 0.5)
             .length,
      sups: [...d.querySelectorAll("msup")].filter(x => box(x.children[1]).bottom >= box(x.children[0]).bottom)
            .length,
      fetched: f.contentWindow.performance.getEntriesByType("resource").map(e => e.name)
               .filter(n => !n.startsWith("data:"))};
  });
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify({math_display: CSS.supports("display", "math"), labs: out});
  document.body.appendChild(pre);
});
</script>"""


def test_every_labs_math_is_laid_out_offline_in_chromium(tmp_path):
    from fpsim.tools.labs_html import write_html

    pages = []
    for path in labs_files.lab_files():
        page = write_html(nbformat.read(path, as_version=4), tmp_path / f"{path.stem}.html")
        pages.append(page.name)
    frames = "".join(f'<iframe src="{name}" style="width:1200px;height:800px"></iframe>' for name in pages)
    (tmp_path / "all.html").write_text(f"<!DOCTYPE html><html><body>{frames}{PROBE}</body></html>", encoding="utf-8")
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
           "--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",  # no network
           "--virtual-time-budget=20000", "--dump-dom", (tmp_path / "all.html").as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, flags=re.S)
    assert found, f"Chromium gave no layout report (exit {done.returncode}): {done.stderr[-800:]}"
    report = json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                        .replace("&amp;", "&"))
    assert report["math_display"], "this Chromium does not lay out MathML"
    assert [r["lab"] for r in report["labs"]] == pages
    for r in report["labs"]:
        static = (tmp_path / r["lab"]).read_text(encoding="utf-8").count("<math")
        assert r["maths"] == static, f"{r['lab']}: the browser found {r['maths']} <math> elements of {static}"
        assert r["flat"] == 0, f"{r['lab']}: {r['flat']} formulas laid out with no size (raw text, not MathML)"
        assert r["fracs"] == 0, f"{r['lab']}: {r['fracs']} fractions whose numerator is not above the denominator"
        assert r["sups"] == 0, f"{r['lab']}: {r['sups']} superscripts not raised above their base"
        assert r["fetched"] == [], f"{r['lab']} fetched {r['fetched']}"
    assert sum(r["maths"] for r in report["labs"]) > 100  # the labs hold many formulas: this checked them
