"""attnlab's names, without torch: what the command line lists and what the registry loads.

``attnlab --help``, ``attnlab --version`` and every verb's ``--help`` must answer at once,
so the parsers cannot import the modules that define these names (they import torch,
about a second and a half of CPU). This module holds them in plain Python, standard
library only.

* :data:`SCHEMES`: the built-in position encodings, name -> ``"module:Class"``. The
  registry (:mod:`attnlab.encodings.registry`) imports a class the first time its name
  is used, so this table is the registry's own: adding a built-in scheme is its module
  plus one row here.
* :data:`RANDOMIZED`: the randomized schemes attnlab lists (Ruoss et al. 2023). Any
  ``"random-NAME"`` works where NAME is a scheme that takes positions, a user's included.
* :data:`ENCODINGS`: every name attnlab lists (:data:`SCHEMES`, then :data:`RANDOMIZED`), what
  ``--encodings all`` runs; :data:`INPUT_TABLES` and :data:`CAUSAL_ONLY` sort them by what their
  classes declare.
* :data:`DEFAULT_ENCODINGS`: what ``attnlab compare`` compares unless told.
* the other lists equal the library's own (tests/test_cli_startup.py checks every one),
  so a name added there and forgotten here fails a test instead of drifting silently.
"""

from __future__ import annotations

__all__ = ["BACKENDS", "CAUSAL_ONLY", "DEFAULT_ENCODINGS", "DTYPES", "ENCODINGS", "ENTRY_POINT_GROUP", "INPUT_TABLES",
           "LAYOUTS", "PRESETS", "PROTOCOLS", "RANDOMIZED", "RATES", "SCHEMES", "SQUARES_MODELS", "STRING_TASKS",
           "TASKS", "TASK_CLASSES", "TOKEN_TASKS"]

#: the built-in position encodings: name -> "module:Class" (the registry loads the class on first use).
SCHEMES: dict[str, str] = {
    "sinusoidal": "attnlab.encodings.positional:PositionalEncoding",
    "learned": "attnlab.encodings.learned:LearnedPositionalEncoding",
    "relative": "attnlab.encodings.relative:ShawRelative",
    "t5": "attnlab.encodings.t5:T5RelativeBias",
    "rotary": "attnlab.encodings.rotary:Rotary",
    "alibi": "attnlab.encodings.alibi:ALiBi",
    "none": "attnlab.encodings.scheme:NoPosition",
    "fire": "attnlab.encodings.fire:FIRE",
    "kerple": "attnlab.encodings.kerple:KERPLE",
    "xpos": "attnlab.encodings.xpos:XPos",
    "cope": "attnlab.encodings.cope:CoPE",
    "rotary-quarter": "attnlab.encodings.rotary:QuarterRotary",
    "abacus": "attnlab.encodings.abacus:AbacusEmbedding",
    "coupling": "attnlab.encodings.coupling:CoupledPositions",
    "transformer-xl": "attnlab.encodings.transformer_xl:TransformerXLRelative",
    "t5-shared": "attnlab.encodings.t5:SharedT5RelativeBias",
    "random-sinusoidal": "attnlab.encodings.randomized_tables:RandomizedSinusoidal",
    "random-learned": "attnlab.encodings.randomized_tables:RandomizedLearned",
}

#: the randomized schemes inside attention that attnlab lists; "random-" before any scheme's name works.
RANDOMIZED: tuple[str, ...] = ("random-relative", "random-t5", "random-rotary", "random-alibi", "random-fire",
                               "random-transformer-xl")

#: every name attnlab lists: the built-in schemes, then the randomized ones.
ENCODINGS: tuple[str, ...] = (*SCHEMES, *RANDOMIZED)
#: the listed names added to the embeddings (input tables, their classes not PositionSchemes).
INPUT_TABLES: tuple[str, ...] = ("sinusoidal", "learned", "abacus", "coupling", "random-sinusoidal", "random-learned")
#: the listed schemes whose classes declare causal_only (refused in a bidirectional attention).
CAUSAL_ONLY: tuple[str, ...] = ("xpos", "cope")

#: what `attnlab compare` compares unless told (explicit, never a slice of SCHEMES).
DEFAULT_ENCODINGS: tuple[str, ...] = ("sinusoidal", "learned", "relative", "t5", "rotary", "alibi", "none")

#: the paths attention takes with a position scheme (attnlab.attention.backends.choose).
BACKENDS: tuple[str, ...] = ("auto", "dense", "flex", "chunked")

#: the entry-point group through which an installed package adds its schemes.
ENTRY_POINT_GROUP = "attnlab.schemes"

#: attnlab's own token tasks (``--symbols`` symbols): name -> "module:Class" of their string generator.
TOKEN_TASKS: dict[str, str] = {
    "copy": "attnlab.data.tasks.basic:Copy",
    "reverse": "attnlab.data.tasks.basic:Reverse",
    "duplicate": "attnlab.data.tasks.basic:Duplicate",
    "sort": "attnlab.data.tasks.basic:Sort",
}

#: the benchmark string tasks: name -> "module:Class" of their string generator.
STRING_TASKS: dict[str, str] = {
    # the 15 tasks of Delétang et al. 2023, as Ruoss et al. 2023 run them
    "even-pairs": "attnlab.data.chomsky.regular:EvenPairs",
    "modular-arithmetic": "attnlab.data.chomsky.regular:ModularArithmetic",
    "parity-check": "attnlab.data.chomsky.regular:ParityCheck",
    "cycle-navigation": "attnlab.data.chomsky.regular:CycleNavigation",
    "stack-manipulation": "attnlab.data.chomsky.dcf:StackManipulation",
    "reverse-string": "attnlab.data.chomsky.dcf:ReverseString",
    "modular-arithmetic-brackets": "attnlab.data.chomsky.brackets:ModularArithmeticBrackets",
    "solve-equation": "attnlab.data.chomsky.brackets:SolveEquation",
    "duplicate-string": "attnlab.data.chomsky.cs:DuplicateString",
    "missing-duplicate": "attnlab.data.chomsky.cs:MissingDuplicate",
    "odds-first": "attnlab.data.chomsky.cs:OddsFirst",
    "binary-addition": "attnlab.data.chomsky.binary:BinaryAddition",
    "binary-multiplication": "attnlab.data.chomsky.binary:BinaryMultiplication",
    "compute-sqrt": "attnlab.data.chomsky.binary:ComputeSqrt",
    "bucket-sort": "attnlab.data.chomsky.cs:BucketSort",
    # Kazemnejad et al. 2023's tasks (SCAN is a fixed set, not a generator: TASK_CLASSES)
    "copy-random": "attnlab.data.kazemnejad.primitive:CopyRandom",
    "copy-repeat": "attnlab.data.kazemnejad.primitive:CopyRepeat",
    "copy-repeat-change": "attnlab.data.kazemnejad.primitive:CopyRepeatChange",
    "copy-random-2x": "attnlab.data.kazemnejad.primitive:CopyRandom2x",
    "copy-repeat-2x": "attnlab.data.kazemnejad.primitive:CopyRepeat2x",
    "reverse-random": "attnlab.data.kazemnejad.primitive:ReverseRandom",
    "reverse-random-2x": "attnlab.data.kazemnejad.primitive:ReverseRandom2x",
    "reverse-copy": "attnlab.data.kazemnejad.primitive:ReverseCopy",
    "addition": "attnlab.data.kazemnejad.mathematical:Addition",
    "kz-sort": "attnlab.data.kazemnejad.mathematical:SortTokens",
    "summation": "attnlab.data.kazemnejad.mathematical:Summation",
    # arithmetic with reversed digits (McLeish et al. 2024, Cho et al. 2024)
    "reversed-addition": "attnlab.data.arithmetic.reversed_digits:ReversedAddition",
    "reversed-multiplication": "attnlab.data.arithmetic.reversed_digits:ReversedMultiplication",
}

#: every task ``attnlab compare --task`` takes: name -> "module:Class" of its string generator (the lab wraps it
#: in its one token task on first use: :func:`attnlab.data.tasks.registry.task_named`) or, for the two that no
#: generator draws, of its task.
TASK_CLASSES: dict[str, str] = {
    **TOKEN_TASKS,
    "squares": "attnlab.data.tasks.squares_task:SquaresTask",  # real values: the corners of noisy squares
    "scan": "attnlab.data.scan.scan_task:ScanTask",  # a fixed set of commands
    **STRING_TASKS,
}

#: every task ``attnlab compare --task`` takes, by name.
TASKS: tuple[str, ...] = tuple(TASK_CLASSES)
#: how a comparison trains and scores (:data:`attnlab.labs.lengths.protocols.PROTOCOLS`).
PROTOCOLS: tuple[str, ...] = ("fixed", "ruoss2023", "kazemnejad2023")
#: the papers' setups ``attnlab compare --preset`` starts from (:data:`attnlab.labs.lengths.presets.PRESETS`).
PRESETS: tuple[str, ...] = ("ruoss2023", "ruoss2023-full", "kazemnejad2023", "kazemnejad2023-full", "abacus2024",
                             "abacus2024-full")
#: the models ``attnlab train --model`` trains (:data:`attnlab.labs.squares.models.SQUARES_MODELS`).
SQUARES_MODELS: tuple[str, ...] = ("selfattn-pe", "gru", "gru-attn", "transformer")

#: the sinusoidal tables' column layouts (:data:`attnlab.encodings.LAYOUTS`).
LAYOUTS: tuple[str, ...] = ("interleaved", "concat", "t2t")
#: the sinusoidal tables' angle rates (:data:`attnlab.encodings.RATES`).
RATES: tuple[str, ...] = ("vaswani", "linspace")
#: the dtypes ``encode`` and ``audit`` build a table in, by torch's names (``torch.float16`` ...).
DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64")
