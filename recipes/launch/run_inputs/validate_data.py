"""A run's data files through the dataset class the run will use, on their first rows (issue 44).

Why: the dry run said "dry run OK" for an RL parquet given as the SFT ``TRAIN_FILE`` (verl's SFT dataset then raised
``KeyError: 'messages'``) and for SFT or plain question/answer data given to RL (the kit's ``ReToolRLDataset``
raised ``SchemaError``), minutes into the job, after it had taken its nodes. The column rule is
:func:`platforms.data_file.phase_problems`, the doctor's ``--data`` rule too; for RL the first rows then go through
the dataset class's own row converter (:func:`recipes.retool.rows.to_rl_row`, what ``ReToolRLDataset`` maps every
row with), so a row it would refuse is refused here, from a handful of rows read in milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from platforms import data_file


def problems(path: str, phase: str, messages: tuple[str, str] | None = None) -> list[str]:
    """Phrases after "data FILE ..." for the file at ``path`` read by ``phase``'s dataset class; [] when it reads.
    SFT: ``messages`` is (the column, the stack's key that names it), as :func:`data_file.phase_problems` takes them."""
    found = data_file.inspect(path)
    wrong = data_file.phase_problems(found, phase, *(messages or ()))
    if wrong or phase != "rl" or not found.fmt:
        return wrong
    from recipes.retool.rows import to_rl_row
    from recipes.retool.sources import SchemaError, default_data_source

    source = default_data_source(found.fmt, path)
    for index, row in enumerate(found.rows):
        try:
            to_rl_row(row, found.fmt, source, "check", index, Path(path).name)
        except SchemaError as exc:
            return [f"row {index + 1}: field {exc.field_name!r}: {exc.problem} (the kit's ReToolRLDataset refuses it)"]
    return []
