"""Pages render as written: every committed page and every page the demo writes, rendered
by a CommonMark reader (markdown-it-py, GFM tables), shows no Markdown escape, no kernel
name cut inside its template, and no absolute path of the capturing machine."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

from markdown_it import MarkdownIt

from analysis.common.names import kernel_label, kernel_labels
from analysis.render.text import code
from analysis.render.text import html as in_html
from tests.conftest import DATA

ROOT = DATA.parent.parent
ESCAPE = re.compile(r"\\[_*`\[\]|#~\\]")
HOME = re.compile(r"/(home|Users|root|work)/")


class _Text(HTMLParser):
    """The text nodes of rendered HTML, entities resolved (what a reader sees)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.nodes: list[str] = []

    def handle_data(self, data: str) -> None:
        self.nodes.append(data)


def seen(md: str) -> list[str]:
    """The text nodes a reader of `md` sees, raw HTML blocks included (<summary> lines
    are shown as the browser shows them)."""
    parser = _Text()
    parser.feed(MarkdownIt("commonmark").enable("table").render(md))
    return parser.nodes


def problems(md: str) -> list[str]:
    """What a reader would see wrong: escapes shown literally, a name cut inside its
    template (an ellipsis after an unclosed `<`), an absolute home path."""
    out = []
    for node in seen(md):
        if ESCAPE.search(node):
            out.append(f"escape shown: {node[:120]!r}")
        for part in node.split("|"):
            head = part.split("…")[0] if "…" in part else None
            if head is not None and head.count("<") > head.count(">"):
                out.append(f"cut inside a template: {part[:120]!r}")
        if HOME.search(node):
            out.append(f"absolute path: {node[:120]!r}")
    return out




def test_demo_pages_render_as_written(demo: list[Path]) -> None:
    for page in demo:
        for md in page.parent.glob("*.md"):
            assert problems(md.read_text()) == [], md


def test_committed_pages_render_as_written() -> None:
    pages = sorted(ROOT.glob("reports/**/*.md"))
    assert pages
    for md in pages:
        assert problems(md.read_text()) == [], md


def test_the_checker_sees_what_it_is_for() -> None:
    """The checks fail on the three faults the pages had."""
    assert problems("- x `train\\_step/load` y")
    assert problems("<details><summary>a\\_b evidence</summary>\n\n</details>")
    assert problems("| void at::vectorized\\_elementwise\\_kernel&lt;8, at::x, … |\n| --- |")
    assert problems("at /home/alice/train.py:95")
    assert not problems(f"- x {code('train_step/load')} y\n\n"
                        f"<details><summary>{in_html('a_b <c> & d')}</summary>\n\n</details>")


def test_code_spans_and_html_show_the_text_itself() -> None:
    for text in ("train_step/load", "a`b", "``x", "aten::mm, seq = 1 | x", "a<b>&c"):
        assert "".join(seen(code(text))).strip() == text.replace("\n", " ")
        assert "".join(seen(f"| h |\n| --- |\n| {code(text, True)} |")).strip().endswith(text)
        assert html.unescape(in_html(text)) == text


def test_kernel_labels_name_the_op_and_stay_apart() -> None:
    name = ("void at::vectorized_elementwise_kernel<4, at::CUDAFunctor_add<float>, "
            "std::array<char *, 3>>(int, T2, T3)")
    assert kernel_label(name) == "vectorized_elementwise_kernel (add)"
    assert kernel_label("void at::native::<unnamed>::CatArrayBatchedCopy<float, unsigned "
                        "int, 4, 64, 64>(T1 *, at::native::<unnamed>::CatArrInputTensor"
                        "Metadata<T1, T2, 64, 64>, int, int, int)") == "CatArrayBatchedCopy"
    assert kernel_label("triton_poi_fused_relu_0") == "triton_poi_fused_relu_0"
    two = ["void a::k<1, binary_internal::MulFunctor<float>>(int)",
           "void a::k<2, binary_internal::MulFunctor<float>>(int)"]
    assert list(kernel_labels(two).values()) == ["k (mul)", "k (mul) #2"]
