"""BERT data command line: generate a small learnable pretraining set, check MLPerf data and checkpoint."""

import argparse
import os
import sys

import suite


def main(argv=None) -> int:
    """Runs one subcommand; returns 0 on success, 1 when `check` finds problems, 2 on bad input."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.name == "check" and not (args.data_dir or args.checkpoint_dir):
        parser.error("check needs --data-dir, --checkpoint-dir or both")
    # Imported here so --help and usage errors do not wait for TensorFlow.
    with suite.lean_tensorflow_import():
        from models.bert import data, prepare

    try:
        return args.command(args, data, prepare)
    except (data.DataError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def _parser():
    parser = argparse.ArgumentParser(prog="python -m models.bert.data_cli", description=__doc__)
    commands = parser.add_subparsers(dest="name", required=True, metavar="COMMAND")

    generate = commands.add_parser(
        "generate", help="write a small learnable dataset in the MLPerf format, with vocab.txt and a tiny "
                         "bert_config.json")
    generate.add_argument("out_dir", metavar="OUT_DIR", help="new or empty directory")
    generate.add_argument("--seq-length", type=_positive, default=128, help="tokens per record (default 128)")
    generate.add_argument("--max-predictions", type=_positive, default=20,
                          help="masked positions per record (default 20)")
    generate.add_argument("--train-records", type=_positive, default=4096)
    generate.add_argument("--eval-records", type=_positive, default=512)
    generate.add_argument("--train-shards", type=_positive, default=4)
    generate.add_argument("--eval-shards", type=_positive, default=2)
    generate.add_argument("--vocab-size", type=_positive, default=128,
                          help="tokens in vocab.txt, the 5 special ones included (default 128)")
    generate.add_argument("--seed", type=int, default=0)
    generate.set_defaults(command=_generate)

    check = commands.add_parser(
        "check", help="check a data directory (MLPerf rules, or dataset.json's) and the phase-1 checkpoint; "
                      "run it once after preparing MLPerf data: it writes the dataset.json that runs need")
    check.add_argument("--data-dir", metavar="DIR", help="holds train/ and eval/")
    check.add_argument("--checkpoint-dir", metavar="DIR",
                       help="holds bert_config.json, vocab.txt and model.ckpt-28252.* (or tf1_ckpt/)")
    check.add_argument("--sample", type=int, default=256,
                       help="records read from the heads of up to 8 files per split (default 256)")
    check.add_argument("--skip-md5", action="store_true", help="compare checkpoint file sizes only")
    check.set_defaults(command=_check)
    return parser


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _generate(args, data, prepare):
    info = prepare.write_learnable_dataset(
        args.out_dir, vocab_size=args.vocab_size, seq_length=args.seq_length,
        max_predictions=args.max_predictions, train_records=args.train_records,
        eval_records=args.eval_records, train_shards=args.train_shards, eval_shards=args.eval_shards,
        seed=args.seed)
    meta = data.read_metadata(info.data_dir)
    print(f"wrote {info.train_records} training records ({len(info.train_files)} files) and "
          f"{info.eval_records} eval records ({len(info.eval_files)} files) of {info.seq_length} tokens, "
          f"{info.max_predictions} predictions, vocabulary {info.vocab_size}, "
          f"to {os.path.abspath(args.out_dir)}")
    print(f"eval masked-LM accuracy of simple predictors: majority word "
          f"{meta['majority_baseline_accuracy']:.4f}, segment's most frequent word "
          f"{meta['segment_rule_accuracy']:.4f}, neighbour rule {meta['context_rule_accuracy']:.4f}")
    return 0


def _check(args, data, prepare):
    notes, problems, new_metadata = [], [], {}
    if args.data_dir:
        problems += prepare.check_mlperf_dataset(args.data_dir, sample_records=args.sample, notes=notes,
                                                 new_metadata=new_metadata)
    if args.checkpoint_dir:
        problems += prepare.check_checkpoint_dir(args.checkpoint_dir, verify_md5=not args.skip_md5)
    info = None
    if args.data_dir and not problems:
        info = data.dataset_info(args.data_dir, metadata=new_metadata or None)
        problems += _cross_problems(args, data, prepare, info)
    for note in notes:
        print(note)
    if problems:
        for problem in problems:
            print(problem)
        return 1
    if new_metadata:
        # Runs describe their data from this file alone: MLPerf's clock starts before the records are read.
        path = prepare.write_metadata(args.data_dir, new_metadata)
        print(f"wrote {path}: runs take the data's lengths and counts from it and read no record before "
              f"run_start")
        info = data.dataset_info(args.data_dir)
    _stamp(args, prepare, info)
    print(_summary(args, info))
    return 0


def _stamp(args, prepare, info):
    """The closed-division stamp, once the MLPerf data and the phase-1 checkpoint have both passed in full."""
    from models.bert import stamp
    if not (args.data_dir and args.checkpoint_dir) or info is None or info.generated:
        return
    if args.skip_md5:
        print(f"no {stamp.STAMP_FILE} written: --skip-md5 left the checkpoint's MD5s unchecked, and closed "
              f"runs need them verified")
        return
    layout = prepare.checkpoint_layout(args.checkpoint_dir)
    path = stamp.write(args.data_dir, info.train_files + info.eval_files, layout.values(),
                       {name: prepare.CHECKPOINT_FILES[name][1] for name in layout})
    print(f"wrote {path}: runs on this data with this checkpoint may be closed division (they compare "
          f"file sizes and times with it, reading no record)")


def _cross_problems(args, data, prepare, info):
    """The data's token ids against the vocabulary of the checkpoint (or of the generated bert_config)."""
    config_path = (os.path.join(args.checkpoint_dir, data.CONFIG_FILE) if args.checkpoint_dir
                   else info.bert_config_file)
    if not config_path:
        return []
    from models.bert.model import BertConfig

    try:
        vocab_size = BertConfig.from_json_file(config_path).vocab_size
    except (ValueError, OSError) as err:
        return [str(err)]
    # The run compares the vocabulary with dataset.json only; the sampled records say which record is out.
    problems = [data.vocabulary_problem(info, vocab_size)
                or prepare.token_id_problem(info, vocab_size, sample=args.sample)]
    if info.vocab_file and not args.checkpoint_dir:
        problems.append(data.vocab_problem(info.vocab_file, vocab_size))
    return [problem for problem in problems if problem]


def _summary(args, info):
    parts = []
    if info:
        known = info.train_records is not None
        train = f"{info.train_records} training records" if known else "training records"
        parts.append(f"{args.data_dir}: {train} in {len(info.train_files)} files, {info.eval_records} eval "
                     f"records, {info.seq_length} tokens, {info.max_predictions} predictions"
                     f"{' (generated)' if info.generated else ''}")
    if args.checkpoint_dir:
        md5 = "sizes" if args.skip_md5 else "sizes and MD5s"
        parts.append(f"{args.checkpoint_dir}: phase-1 checkpoint files present, {md5}, vocabulary and "
                     f"variables match")
    return "OK: " + "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
