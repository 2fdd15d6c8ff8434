"""ResNet-50 data command line: generate a small learnable set, convert raw ImageNet, check TFRecords."""

import argparse
import os
import sys

import suite


def main(argv=None) -> int:
    """Runs one subcommand; returns 0 on success, 1 when `check` finds problems, 2 on bad input."""
    args = _parser().parse_args(argv)
    # Imported here so --help and usage errors do not wait for TensorFlow.
    with suite.lean_tensorflow_import():
        from models.resnet50 import data, prepare

    try:
        return args.command(args, data, prepare)
    except (data.DataError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def _parser():
    parser = argparse.ArgumentParser(prog="python -m models.resnet50.data_cli", description=__doc__)
    commands = parser.add_subparsers(dest="name", required=True, metavar="COMMAND")

    generate = commands.add_parser("generate", help="write a small learnable ImageNet-shaped dataset")
    generate.add_argument("out_dir", metavar="OUT_DIR", help="new or empty directory")
    generate.add_argument("--classes", type=_positive, default=4)
    generate.add_argument("--train-per-class", type=_positive, default=64)
    generate.add_argument("--eval-per-class", type=_positive, default=16)
    generate.add_argument("--image-size", type=_positive, default=64, help="typical image side in pixels")
    generate.add_argument("--train-shards", type=_positive, default=4)
    generate.add_argument("--eval-shards", type=_positive, default=2)
    generate.add_argument("--seed", type=int, default=0)
    generate.set_defaults(command=_generate)

    convert = commands.add_parser("convert",
                                  help="convert raw ImageNet (train/<wnid>/*.JPEG, val/) to TFRecords")
    convert.add_argument("raw_dir", metavar="RAW_DIR")
    convert.add_argument("out_dir", metavar="OUT_DIR", help="new or empty directory")
    convert.add_argument("--train-shards", type=_positive, default=1024)
    convert.add_argument("--eval-shards", type=_positive, default=128)
    convert.add_argument("--workers", type=_positive, default=None, help="default: number of CPUs")
    convert.add_argument("--bounding-boxes", action="store_true",
                         help="also write the boxes of LOC_train_solution.csv and LOC_val_solution.csv; "
                              "the reference data has none, so this makes the data open division only")
    convert.set_defaults(command=_convert)

    check = commands.add_parser(
        "check", help="read every record and report problems; when clean, write dataset.json if absent "
                      "(runs read only dataset.json and the file listing before the clock starts)")
    check.add_argument("data_dir", metavar="DATA_DIR")
    check.add_argument("--small", action="store_true",
                       help="not full ImageNet: check consistency with dataset.json only")
    check.add_argument("--sample", type=int, default=200, help="records whose JPEG is decoded (default 200)")
    check.set_defaults(command=_check)
    return parser


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _generate(args, data, prepare):
    info = prepare.write_learnable_dataset(
        args.out_dir, num_classes=args.classes, train_per_class=args.train_per_class,
        eval_per_class=args.eval_per_class, image_size=args.image_size, train_shards=args.train_shards,
        eval_shards=args.eval_shards, seed=args.seed)
    print(f"wrote {info.train_records} training and {info.eval_records} validation records "
          f"({info.num_classes} classes) to {os.path.abspath(args.out_dir)}")
    return 0


def _convert(args, data, prepare):
    info = prepare.convert_imagenet(args.raw_dir, args.out_dir, train_shards=args.train_shards,
                                    eval_shards=args.eval_shards, num_workers=args.workers,
                                    progress=sys.stderr.isatty(), bounding_boxes=args.bounding_boxes)
    print(f"wrote {info.train_records} training and {info.eval_records} validation records "
          f"({info.num_classes} classes) to {os.path.abspath(args.out_dir)}")
    return 0


def _check(args, data, prepare):
    check = prepare.check_dataset(args.data_dir, expect_full_imagenet=not args.small,
                                  sample_records=args.sample, progress=sys.stderr.isatty())
    if check.problems:
        for problem in check.problems:
            print(problem)
        return 1
    added = prepare.write_checked_metadata(check)
    path = os.path.join(args.data_dir, data.METADATA_FILE)
    if added and check.metadata is None:
        print(f"wrote {path} with the counts found")
    elif added:
        print(f"added {', '.join(added)} to {path}")
    info = data.dataset_info(args.data_dir)
    kind = "small dataset" if args.small else "full ImageNet"
    print(f"OK: {args.data_dir}: {kind}, {info.train_records} training records in {len(info.train_files)} "
          f"shards, {info.eval_records} validation records in {len(info.eval_files)} shards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
