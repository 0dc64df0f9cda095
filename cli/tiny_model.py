"""`ray-efa tiny-model DIR`: write a tiny model folder to fine-tune offline (DIR/tiny-qwen2 for modelPath, DIR/data for dataset).

DIR/tiny-qwen2 holds a byte-level BPE tokenizer (512 tokens) and a tiny Qwen2 (the `tiny` preset's shape, random weights,
0.38 M parameters) as save_pretrained writes them; DIR/data two parquet files with a `text` column of English
paragraphs; DIR/SOURCES.txt where the text came from: the license files of the Python packages installed here
(nothing is downloaded). Then, e.g.:
  ray-efa train --local -c modelPath=$PWD/DIR/tiny-qwen2 -c dataset=$PWD/DIR/data -c evalFraction=0.1
DIR must be new, empty, or a folder ray-efa wrote before (replaced whole); any other folder is refused (exit 2).
Exit 1 when this machine has too little license text, 4 without the train extra.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ray_efa.cli._common import EXIT_USAGE, add_json_option, fail, missing_train_extra, print_json

EXIT_NO_TEXT = 1
"""Too little license text on this machine to make a tokenizer and a held-out split from."""


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="write a tiny model + tokenizer and an English text data set to fine-tune offline",
        description=(__doc__ or "").partition("\n")[0],
        epilog=(__doc__ or "").partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", type=Path, metavar="DIR", help="the folder to write (new, empty, or written by ray-efa)")
    add_json_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if (code := missing_train_extra("tiny-model")) is not None:
        return code
    from ray_efa.core.output_dir import OutputDirError, check_output_dir
    from ray_efa.training.tiny_model import TinyModelError, make_tiny_model

    try:
        check_output_dir(args.dir)  # before the text is read and a tokenizer trained
        tiny = make_tiny_model(args.dir)
    except OutputDirError as error:
        return fail(args, "tiny-model", str(error), code=EXIT_USAGE)
    except TinyModelError as error:
        return fail(args, "tiny-model", str(error), code=EXIT_NO_TEXT)
    except OSError as error:
        return fail(args, "tiny-model", f"cannot write {args.dir}: {error.strerror or error}", code=EXIT_USAGE)
    context = tiny.context()
    if args.json:
        print_json(
            {
                "root": str(tiny.root),
                "model_path": str(tiny.model),
                "dataset": str(tiny.data),
                "paragraphs": tiny.paragraphs,
                "context": context,
            }
        )
        return 0
    print(
        f"wrote {tiny.root}: {tiny.model.name}/ (tokenizer + tiny Qwen2, modelPath), data/ ({tiny.paragraphs} English "
        "paragraphs in parquet, dataset), SOURCES.txt (the license files they came from)"
    )
    flags = " ".join(f"-c {key}={value}" for key, value in context.items())
    print(f"fine-tune it locally: ray-efa train --local {flags}")
    return 0
