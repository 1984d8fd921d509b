"""Make docs/viewer.png, the README's screenshot of the token viewer (headless system Chromium).

Run from the project root: .venv/bin/python scripts/viewer_screenshot.py [--corpus ../shared/corpus]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Capital of France?"},
    {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy."},
    {"role": "user", "content": "And of Italy?"},
    {"role": "assistant", "content": "Rome.", "reasoning_content": "Also easy."},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=os.environ.get("RLLM_CORPUS", str(REPO.parent / "shared" / "corpus")))
    parser.add_argument("--out", default=str(REPO / "docs" / "viewer.png"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from rllm_renderers.generated.qwen3 import Qwen3Renderer
    from rllm_renderers.encoding.loading import load_tokenizer
    from rllm_renderers.view import token_view

    renderer = Qwen3Renderer(load_tokenizer(Path(args.corpus) / "tokenizers" / "qwen3"))
    view = token_view(renderer, MESSAGES, train_on="all_assistant", title="Qwen/Qwen3-8B, train_on='all_assistant'")
    with tempfile.TemporaryDirectory() as folder:
        page_file = view.save_html(Path(folder) / "tokens.html")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 760, "height": 470})
            page.goto(page_file.as_uri())
            position = max(k for k, record in enumerate(view.records) if record.trained)  # the last close
            page.hover(f'.tok[data-pos="{position}"]')
            page.screenshot(path=args.out, full_page=True)
            browser.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
