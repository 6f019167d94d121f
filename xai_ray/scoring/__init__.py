"""The Ray actor that scores a batch (``actor.Scorer``: model once, rows out), long reviews cut into
model inputs (``segments``), and the faithfulness metrics it computes beside (``evaluation``,
``faithfulness``).
"""
