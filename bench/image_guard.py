"""What the import guard (pipeline.emulator.image_guard) adds to a host process's start: the launcher's imports with and
without it, in alternation, in one run. Prints JSON.

    .venv/bin/python bench/image_guard.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.emulator import image_guard  # noqa: E402
from pipeline.sagemaker.images import default_training_image  # noqa: E402

IMPORTS = {
    "pytorch": "import torch, numpy, PIL, sagemaker_training.environment",
    "tensorflow": "import tensorflow, numpy, PIL, sagemaker_training.environment",
}


def _start(code: str, pythonpath: str) -> float:
    env = {**os.environ, "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = {}
    for framework, code in IMPORTS.items():
        image = default_training_image("us-east-1", framework)
        with tempfile.TemporaryDirectory() as folder:
            guard = image_guard.guard_path(image, Path(folder))
            _start(code, guard)  # warm the file cache
            plain, guarded = [], []
            for _ in range(args.repeats):
                plain.append(_start(code, ""))
                guarded.append(_start(code, guard))
        results[framework] = {
            "image": image,
            "plain_s": round(statistics.median(plain), 3),
            "guarded_s": round(statistics.median(guarded), 3),
            "added_s": round(statistics.median(guarded) - statistics.median(plain), 3),
            "ratio": round(statistics.median(guarded) / statistics.median(plain), 3),
        }
    print(json.dumps({"bench": "image_guard", "repeats": args.repeats, "process_start_with_imports": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
