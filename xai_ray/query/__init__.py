"""DuckDB over a store: the sandboxed connection and its views (``connection``), SQL a user types
(``user_sql``, judged by ``guard``, run in a capped child process by ``isolated`` under
``limits``), the top words (``top_words``, defined by ``wordstats``); every query one file in
``sql/``.
"""
