"""What a person reads: the HTML report (``page`` + ``sections``, ``changes``, ``faithfulness``,
``heads``), Altair charts (``charts``, ``charts_faithfulness``, ``head_charts``; DataFrame in, chart
out), one review in depth (``explain``), files written where the user said (``outputs``).
"""
