"""The store: Parquet tables of one run per folder, published only when complete.

``layout`` (where files go), ``schemas`` (what their columns are), ``files`` (atomic writes),
``staging`` (durable parts of a run being written), ``writer`` (a run's rows in, one published run
out), ``aggregates`` (small results kept beside a run), ``remote`` (object-store mirrors).
"""


class StoreError(RuntimeError):
    """The store cannot do what was asked; the message says why."""
