"""The Larkspur Library's generated tasks: "reserve this book", as task rows of the published schema.

Each row names its kind in ``environment`` (``library``: `examples.my_site.kind.LibraryTask`), starts
on the site's front page, and carries a two-fact rubric (so a rubric judge could grade it from the
screenshots too) and, in ``source.metadata``, the book that the truth must show reserved: never shown
to an agent.
"""

from __future__ import annotations

import json
import random

from examples.my_site.site import Book, catalogue
from webgym_data import FactGroup, Task, TaskSource

WEBSITE = "http://larkspur-library.test"
"""The site's name in the task set (a reserved ``.test`` name, never looked up): the build's site
split keeps all of its tasks on one side."""


# --8<-- [start:task]
def reserve_task(book: Book, site_url: str) -> Task:
    """The task of reserving `book` (and nothing else) on the site at `site_url`."""
    rubric = (FactGroup("reservation", "what the session reserved",
                        (f"{book.title} by {book.author} is reserved", "no other book is reserved")),)
    return Task(task_id=f"larkspur-reserve-{book.book_id}",
                task_name=f'Reserve "{book.title}" by {book.author} at the Larkspur Library.',
                website=WEBSITE, start_url=f"{site_url}/", benchmark_name="larkspur-library",
                environment="library", evaluator_reference=rubric,
                source=TaskSource(importer="my_site", metadata=json.dumps({"book": book.book_id})))
# --8<-- [end:task]


def library_tasks(site_url: str, count: int, *, seed: int = 0) -> list[Task]:
    """`count` reservation tasks on the catalogue of `seed` (the site must be started with it)."""
    books = catalogue(seed)
    return [reserve_task(book, site_url) for book in random.Random(seed).sample(books, count)]


def book_of(task: Task) -> str:
    """The book id `task` asks to reserve (what the judge compares the truth with)."""
    return json.loads(task.source.metadata)["book"]
