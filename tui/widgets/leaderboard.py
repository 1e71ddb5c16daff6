"""The leaderboard: a DataTable keyed by configuration, updated in place as results stream in.

Each frame the board asks the state which rows it should show, in which order, then removes the
rows that left, adds the ones that came, and updates only the cells that changed (the Memray
live-table pattern). Every result has its row: the table draws only the rows on screen, and a
row's cells are formatted again only when something they show has changed.

Rank, median time, % of SOL, speedup and status are always shown. The parameters get a column
each when they fit; otherwise they collapse into one column that names only the parameters
whose value is not the default configuration's, long names abbreviated. Enter shows a row's
whole configuration.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Input, Static

from ..columns import COLUMN, COLUMNS, columns_for, optional
from ..state import BoardView, DashboardState, FilterError
from ..terminal import printable
from ..words import fmt_value

# The columns after the rank and the parameters come from tui/columns.py, which also says which
# are dropped first when the table would not fit the terminal (the details screen has them all).
# A parameter name longer than this is abbreviated in headers and in the configuration column.
NAME_WIDTH = 8
# The failed view's message column gets the room left, and at least this much.
MESSAGE_MIN = 30
# The collapsed configuration column's least width.
CONFIG_MIN = 12
MESSAGE_MAX = 400  # characters of a message kept in its cell (the details have it all)
ARROWS = {False: "↑", True: "↓"}

Cell = tuple[str, str]  # (text, style): cheap to compare; made into Text only when it changed


def column_label(key: str) -> str:
    """A column key as people read it: `param:BLOCK` is BLOCK, `median` is median µs."""
    if key.startswith("param:"):
        return key[6:]
    if key == "rank":
        return "rank"
    return COLUMN[key].title if key in COLUMN else key


def abbreviations(names: list[str], width: int = NAME_WIDTH) -> dict[str, str]:
    """Short names for the leaderboard: a name up to `width` stays; a longer one made of words
    (ITEMS_PER_THREAD) becomes their initials (IPT), any other its start and an ellipsis.
    Two names never share an abbreviation: on a clash the longer form is used."""
    out: dict[str, str] = {}
    for name in names:
        words = [w for w in name.split("_") if w]
        if len(name) <= width:
            short = name
        elif len(words) > 1:
            short = "".join(w[0] for w in words)
        else:
            short = name[: width - 1] + "…"
        out[name] = short
    taken: dict[str, int] = {}
    for short in out.values():
        taken[short] = taken.get(short, 0) + 1
    for name, short in out.items():
        if taken[short] > 1 or (short != name and short in names):
            out[name] = name if len(name) <= 2 * width else name[: 2 * width - 1] + "…"
    return out


def config_text(state: DashboardState, config: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """The parameters that differ from the default configuration, as `NAME=value` (abbreviated)."""
    differ = state.differs(config)
    if not differ:
        return "default" if state.default_config else ""
    return " ".join(f"{names.get(n, n)}={fmt_value(v)}" for n, v in differ)


def all_cells(state: DashboardState, key: str, names: Mapping[str, str]) -> dict[str, Cell]:
    """Every cell a configuration's row could show, by column key (formats and styles: tui/columns.py)."""
    e = state.entries[key]
    r = e.result
    rank = state.rank(key)
    best = rank == 1
    failed = not r.verified
    out: dict[str, Cell] = {
        "rank": (f"{rank}{state.marks.get(key, '')}" if rank else ("!" if r.status == "suspect" else "x"),
                 "bold" if best or key in state.marks else "dim"),
    }
    for name in state.parameters:
        out[f"param:{name}"] = (fmt_value(r.config.get(name, "")), "dim" if failed else "")
    out["config"] = (config_text(state, r.config, names), "dim" if failed else "")
    base = state.default_us
    for c in COLUMNS:
        v = c.value(r, base)
        out[c.key] = (c.screen(v), c.style(v))
    if best:
        out["median"] = (out["median"][0], "bold")
    w = state.winner
    if w is not None and dict(w.config) == dict(r.config):
        text = out["status"][0]
        out["status"] = (text + " ✓", "bold green") if w.ok else (text + " ✗ re-check", "bold red")
    out["message"] = (first_line(r.message)[:MESSAGE_MAX], "red" if failed else "dim")
    if r.disturbed and not failed:  # measured again during a disturbance and still disturbed
        out["status"] = (out["status"][0] + " ~", "yellow")
        out["message"] = (f"disturbed: {r.disturbed}"[:MESSAGE_MAX], "yellow")
    return out


def first_line(message: str) -> str:
    """A message's first paragraph on one line (a compile error's log follows after a blank line)."""
    head = message[:4096].strip().split("\n\n", 1)[0]  # (the first paragraph of a megabyte is in its start)
    return printable(" ".join(head.split()))


def row_cells(state: DashboardState, key: str, columns: list[tuple[str, str]]) -> tuple[Cell, ...]:
    """The formatted cells of one configuration's row for these columns."""
    cells = all_cells(state, key, abbreviations(state.parameters))
    return tuple(cells[c] for c, _ in columns)


def fit_columns(state: DashboardState, widths: Mapping[str, int], room: int, show_message: bool,
                labels: Mapping[str, str]) -> list[tuple[str, str, int]]:
    """(key, label, width) of the columns that fit `room` cells, each taking its width plus two.

    Rank, median, % SOL, speedup and status always stay. A column per parameter when they fit
    (dropping the device, occupancy, GB/s and spread first); else the parameters collapse into
    one configuration column, which takes the room the other columns leave. The device column is
    there only when the results come from more than one device. In the failed view the
    message takes whatever is left when that is at least MESSAGE_MIN cells (or all it needs);
    with less, it has no column and the line under the table shows the selected row's, wrapped.
    """
    def width(key: str) -> int:
        return max(widths.get(key, 0), cell_len(labels[key]))

    def total(cols: list[tuple[str, str, int]]) -> int:
        return sum(w + 2 for _, _, w in cols)

    shown = columns_for(state.several_devices, state.energy)
    droppable = optional(shown)
    rank = [("rank", labels["rank"], width("rank"))]
    per_param = [(f"param:{p}", labels[f"param:{p}"], width(f"param:{p}")) for p in state.parameters]
    config = width("config")

    def fixed(n: int) -> list[tuple[str, str, int]]:
        return [(c.key, labels[c.key], width(c.key)) for c in shown if c.key not in droppable[:n]]

    def with_message(cols: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        if not show_message:
            return cols
        left = room - total(cols) - 2
        return cols + [("message", labels["message"], min(width("message"), left))]

    # In the failed view the optional columns stay only while every message fits whole.
    message = width("message") + 2 if show_message else 0
    for n in range(len(droppable) + 1):
        cols = rank + per_param + fixed(n)
        if total(cols) + message <= room:
            return with_message(cols)
    least = len(droppable) if show_message else 0
    message = min(width("message"), MESSAGE_MIN) + 2 if show_message else 0
    cols = rank + per_param + fixed(len(droppable))
    if show_message and total(cols) + message <= room:
        return with_message(cols)
    for n in range(least, len(droppable) + 1):
        left = room - total(rank + fixed(n)) - message - 2
        if config <= left or (n == len(droppable) and left >= CONFIG_MIN):
            return with_message(rank + [("config", labels["config"], min(config, left))] + fixed(n))
    if show_message:  # no room for a readable message column: the line under the table has it
        return fit_columns(state, widths, room, False, labels)
    left = room - total(rank + fixed(len(droppable))) - 2
    return rank + [("config", labels["config"], max(min(config, left), CONFIG_MIN))] + fixed(len(droppable))


_RIGHT = {"rank"} | {c.key for c in COLUMNS if c.right}


def _text(col: str, cell: Cell) -> Text:
    right = col in _RIGHT or col.startswith("param:")
    return Text(printable(cell[0]), style=cell[1], justify="right" if right else "left", no_wrap=True, overflow="ellipsis")


class FilterLine(Input):
    """The filter being typed; the footer shows its two keys instead of the dashboard's."""

    BINDINGS = [
        Binding("enter", "submit", "Keep the filter"),
        Binding("escape", "app.clear_filter", "Clear the filter"),
    ]


class Leaderboard(Vertical):
    """The table, its filter line, and a title that says what is shown and how it is sorted."""

    def __init__(self, state: DashboardState, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.state = state
        self.view = BoardView()
        self.filter_error = ""
        self.shown_keys: list[str] = []
        self.matched = 0
        self.collapsed = False  # the parameters share one configuration column
        self._layout: list[tuple[str, str, int]] = []
        self._rows: dict[str, tuple[Cell, ...]] = {}
        # A row's cells, kept until something they show changes: (what they depend on, cells).
        self._cells: dict[str, tuple[tuple, dict[str, Cell]]] = {}
        self._widths: dict[str, int] = {}
        self._names: dict[str, str] = {}
        self._first: dict[int, str] = {}  # id of a row's first cell -> its key, to put rows in order
        self._order_shown: list[str] = []

    def compose(self) -> ComposeResult:
        table: DataTable = DataTable(id="board-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static(id="board-message")
        yield FilterLine(placeholder="filter: BLOCK=256  VEC>=4  sol>50  wrong   (enter: keep, esc: clear)",
                         id="board-filter", compact=True)

    @property
    def table(self) -> DataTable:
        return self.query_one("#board-table", DataTable)

    # what the user changes ---------------------------------------------------------------------
    def toggle_failed(self) -> bool:
        self.view = replace(self.view, show_failed=not self.view.show_failed)
        self.show()
        return self.view.show_failed

    def sort_by(self, column: str, reverse: bool | None = None) -> None:
        if reverse is None:
            reverse = (not self.view.reverse) if column == self.view.sort else _descending(column)
        self.view = replace(self.view, sort=column, reverse=reverse)
        self.show()

    def sort_columns(self) -> list[str]:
        return (["rank"] + [f"param:{p}" for p in self.state.parameters]
                + [c.key for c in columns_for(self.state.several_devices, self.state.energy)])

    def next_sort(self) -> str:
        cols = self.sort_columns()
        i = cols.index(self.view.sort) if self.view.sort in cols else 0
        column = cols[(i + 1) % len(cols)]
        self.view = replace(self.view, sort=column, reverse=_descending(column))
        self.show()
        return column

    def reverse_sort(self) -> None:
        self.view = replace(self.view, reverse=not self.view.reverse)
        self.show()

    def set_filter(self, text: str) -> None:
        self.view = replace(self.view, filter=text)
        self.show()

    def selected_key(self) -> str | None:
        table = self.table
        if not table.row_count:
            return None
        try:
            return table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        except Exception:  # the cursor is past the last row while rows are being replaced
            return None

    # the frame's update ------------------------------------------------------------------------
    def _labels(self) -> dict[str, str]:
        """Column labels; the sort column's carries an arrow (a parameter's marks the configuration)."""
        names = self._names
        labels = {"rank": "#", "config": "config", "message": "message"}
        labels.update({f"param:{p}": printable(names.get(p, p)) for p in self.state.parameters})
        labels.update((c.key, c.header) for c in COLUMNS)
        sort, arrow = self.view.sort, ARROWS[self.view.reverse]
        if sort in labels:
            labels[sort] = f"{labels[sort]} {arrow}"
        if sort.startswith("param:"):
            labels["config"] = f"config ({names.get(sort[6:], sort[6:])} {arrow})"
        return labels

    def _row(self, key: str) -> dict[str, Cell]:
        """A row's cells, formatted again only when its rank, the default configuration's time or the winner changed."""
        state = self.state
        e = state.entries[key]
        w = state.winner
        depends = (e.seq, state.rank(key), state.default_us, id(w), len(state.parameters), id(state.leaders))
        cached = self._cells.get(key)
        if cached is not None and cached[0] == depends:
            return cached[1]
        cells = all_cells(state, key, self._names)
        self._cells[key] = (depends, cells)
        widths = self._widths
        for col, (text, _) in cells.items():
            n = cell_len(text)
            if n > widths.get(col, 0):
                widths[col] = n
        return cells

    def show(self) -> None:
        """Bring the table in line with the state: rows out, rows in, changed cells, order."""
        state, table = self.state, self.table
        try:
            keys, matched = state.board(self.view)
            self.filter_error = ""
        except FilterError as e:
            self.filter_error = str(e)
            keys = [k for k in self.shown_keys if k in state.entries]
            matched = self.matched
        names = abbreviations(state.parameters)
        if names != self._names:  # a parameter seen for the first time: every row again
            self._names, self._cells, self._widths = names, {}, {}
        self._cells = {k: v for k, v in self._cells.items() if k in state.entries} \
            if len(self._cells) > len(state.entries) else self._cells
        cells = {k: self._row(k) for k in keys}
        show_message = self.view.show_failed and state.failed_count > 0
        room = (self.size.width or 80) - 3  # the border and the scrollbar
        layout = fit_columns(state, self._widths, room, show_message, self._labels())
        self.collapsed = any(k == "config" for k, _, _ in layout)
        cursor_key = self.selected_key()
        at_top = table.cursor_row == 0
        # Widths are set, not measured by the table: the layout is the same however the rows
        # arrived (a table measuring on idle can paint a frame with last frame's widths). A
        # change of width (rank 9 to 10, a longer status) builds the table again.
        if layout != self._layout:
            table.clear(columns=True)
            for key, label, width in layout:
                table.add_column(_text(key, (label, "bold")), key=key, width=width)
            self._layout = layout
            self._rows, self._first, self._order_shown = {}, {}, []
        columns = [k for k, _, _ in layout]
        wanted = set(keys)
        for key in [k for k in self._rows if k not in wanted]:
            table.remove_row(key)
            del self._rows[key]
        added = False
        for key in keys:
            row = cells[key]
            now = tuple(row[c] for c in columns)
            old = self._rows.get(key)
            if old is None:
                texts = [_text(c, cell) for c, cell in zip(columns, now)]
                self._first[id(texts[0])] = key
                table.add_row(*texts, key=key)
                added = True
            elif old != now:
                for col, a, b in zip(columns, old, now):
                    if a != b:
                        text = _text(col, b)
                        if col == columns[0]:
                            self._first[id(text)] = key
                        table.update_cell(key, col, text)
            self._rows[key] = now
        if added or keys != self._order_shown:
            self._order(keys, columns[0])
        if cursor_key is not None and not at_top and cursor_key in wanted:
            table.move_cursor(row=table.get_row_index(cursor_key), animate=False)
        self.shown_keys, self.matched = keys, matched
        self._titles()
        self.show_message()

    def show_message(self) -> None:
        """Under the table, the selected configuration's message (a failure's reason), wrapped."""
        line = self.query_one("#board-message", Static)
        if self.filter_error:
            line.display = True
            line.update(Text.assemble(("filter error: ", "bold red"), printable(self.filter_error)))
            return
        key = self.selected_key()
        r = self.state.entries[key].result if key in self.state.entries else None
        if r is None or not r.message.strip() or r.verified:
            line.display = False
            return
        line.display = True
        line.update(Text.assemble((f"{printable(r.status)}: ", "bold red"), first_line(r.message)))

    def on_resize(self, event) -> None:
        # The columns are chosen for the board's width, which changes with the layout.
        if self.is_mounted:
            self.show()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_message()

    def _order(self, keys: list[str], first_column: str) -> None:
        """Put the rows in `keys` order. DataTable sorts by cell values; each row's first cell
        is a Text of its own, so its identity names the row."""
        place = {k: i for i, k in enumerate(keys)}
        first, end = self._first, len(keys)

        def position(cell: Any) -> int:
            return place.get(first.get(id(cell), ""), end)

        self.table.sort(first_column, key=position)
        self._order_shown = list(keys)

    def _titles(self) -> None:
        state, view = self.state, self.view
        title = f"Leaderboard · {state.ranked_count} ranked"
        tied = sum(1 for m in state.marks.values() if m == "=")
        if tied:
            title += f" · * reported, tied with {tied} (=)"
        if state.suspect:
            title += f" · {len(state.suspect)} suspect"
        if state.failed_count:
            title += f" · {state.failed_count} failed" + ("" if view.show_failed else " (f shows)")
        self.border_title = title
        sub = f"sort: {column_label(view.sort)} {ARROWS[view.reverse]}"
        if self.filter_error:
            sub = "filter error (see below)"
        elif view.filter.strip():
            sub = f"filter: {view.filter.strip()} ({self.matched} match) · " + sub
        self.border_subtitle = Text(printable(sub))


def _descending(column: str) -> bool:
    # Bigger is better for some: sort them best first.
    return column in COLUMN and COLUMN[column].descending
