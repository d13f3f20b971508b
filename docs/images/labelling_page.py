"""Takes the screenshot of the few-shot labelling page in the docs
(``fewshot-labelling-page.png`` beside this file): a short
``fewshot-omniglot-active --oracle web`` run on the real Omniglot, whose
first question Playwright opens in Debian's Chromium with the model's guess
shown, then quits. The trainings are a few steps long (the page, not the
model, is the subject), so it takes a minute or two on a CPU, most of it
decoding Omniglot once into the data root.

    GRAPHSEQ_MIRROR=/path/to/datasets python docs/images/labelling_page.py

Needs ``pip install playwright`` and ``apt-get install chromium``.
"""
import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent

# Each training a few steps; the run the pipeline starts from, too.
TINY = {"train.steps": 4, "train.batch_size": 4, "train.eval_episodes": 0, "test.episodes": 20,
        "test.batch_size": 20}
SETTINGS = {**TINY, **{key.replace("train.", "train_random_trained.").replace("test.", "test_random_trained."): value
                       for key, value in TINY.items()},
            "oracle.episodes": 5, "start.overrides": [f"{key}={value}" for key, value in TINY.items()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", default=None, help="where Omniglot is decoded (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=HERE / "fewshot-labelling-page.png")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as work:
        command = [sys.executable, "-m", "graphseq.cli", "run", "fewshot-omniglot-active", "--oracle", "web",
                   "--quiet", "--out", f"{work}/run", "--data-root", args.data_root or f"{work}/data",
                   *(f"--set={key}={value!r}" if isinstance(value, list) else f"--set={key}={value}"
                     for key, value in SETTINGS.items())]
        run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        for line in run.stderr:
            found = re.search(r"label in your browser: (\S+)", line)
            if found:
                break
            sys.stderr.write(line)
        else:
            sys.exit(f"the run ended before its first question (exit status {run.wait()})")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium)
            page = browser.new_page(viewport={"width": 900, "height": 700})
            page.goto(found.group(1))
            page.wait_for_selector("#question:not([hidden])")
            page.keyboard.press("g")  # the model's guess, shown
            page.wait_for_function("[...document.images].every(image => image.complete)")
            # The address holds the run's token: the screenshot shows the page, not the browser's bar.
            page.screenshot(path=str(args.out), full_page=True)
            page.keyboard.press("q")
            browser.close()
        run.wait()
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
