"""The leaderboard: a DataTable keyed by configuration, updated in place as results stream in.

Each frame the board asks the state which rows it should show, in which order, then removes the
rows that left, adds the ones that came, and updates only the cells that changed (the Memray
live-table pattern). It shows the best `limit` configurations; a filter reaches any other.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Input, Static

from ..state import BoardView, DashboardState, FilterError
from ..text import fmt_gbs, fmt_percent, fmt_speedup, fmt_us

# (key, label) of the columns after the rank and the parameters.
FIXED = [
    ("median", "median µs"),
    ("spread", "spread"),
    ("gbs", "GB/s"),
    ("sol", "% SOL"),
    ("speedup", "speedup"),
    ("occ", "occ"),
    ("status", "status"),
]
# Dropped in this order when the table would not fit the terminal (the details screen has them).
OPTIONAL = ("occ", "gbs", "spread")
SORTABLE_NAMES = {"rank": "rank", "median": "median µs", "spread": "spread", "gbs": "GB/s", "sol": "% SOL",
                  "speedup": "speedup", "occ": "occupancy", "status": "status"}
_STATUS_STYLE = {"ok": "green", "suspect": "bold yellow"}

Cell = tuple[str, str]  # (text, style): cheap to compare; made into Text only when it changed


def column_label(key: str) -> str:
    """A column key as people read it: `param:BLOCK` is BLOCK, `median` is median µs."""
    if key.startswith("param:"):
        return key[6:]
    return SORTABLE_NAMES.get(key, key)


def all_columns(state: DashboardState, show_message: bool) -> list[tuple[str, str]]:
    """Every column this board could show: rank, parameters, figures, status (and the message)."""
    cols = [("rank", "#")] + [(f"param:{p}", p) for p in state.parameters] + list(FIXED)
    if show_message:
        cols.append(("message", "message"))
    return cols


def fit_columns(columns: list[tuple[str, str]], widths: dict[str, int], room: int) -> list[tuple[str, str]]:
    """Drop the optional columns, least useful first, until the rest fit `room` cells."""
    def need(cs: list[tuple[str, str]]) -> int:
        # The message column is last and may be cut, but it should get a readable start.
        return sum(min(widths[k], 32) + 2 if k == "message" else widths[k] + 2 for k, _ in cs)

    for key in OPTIONAL:
        if need(columns) <= room:
            break
        columns = [c for c in columns if c[0] != key]
    return columns


def row_cells(state: DashboardState, key: str, columns: list[tuple[str, str]]) -> tuple[Cell, ...]:
    """The formatted cells of one configuration's row (the same formats as the text mode)."""
    e = state.entries[key]
    r = e.result
    rank = state.rank(key)
    best = rank == 1
    base = state.baseline_us
    failed = not r.verified
    out: list[Cell] = []
    for col, _ in columns:
        if col == "rank":
            out.append((str(rank) if rank else ("!" if r.status == "suspect" else "x"), "bold" if best else "dim"))
        elif col.startswith("param:"):
            v = r.config.get(col[6:], "")
            out.append((str(int(v)) if isinstance(v, bool) else str(v), "dim" if failed else ""))
        elif col == "median":
            out.append((fmt_us(r.median_us), "bold" if best else ""))
        elif col == "spread":
            noisy = r.spread is not None and r.spread > 0.25
            out.append((fmt_percent(r.spread), "yellow" if noisy else ""))
        elif col == "gbs":
            out.append((fmt_gbs(r.bandwidth_gbs), ""))
        elif col == "sol":
            # Above 100 % a result beat its own bound: a warm cache or a broken measurement.
            over = r.sol_fraction is not None and r.sol_fraction > 1.0
            out.append((fmt_percent(r.sol_fraction), "yellow" if over else ""))
        elif col == "speedup":
            s = state.speedup(r)
            out.append((fmt_speedup(base, r.median_us), "green" if s and s > 1.0 else ""))
        elif col == "occ":
            out.append((f"{100 * r.occupancy:.0f}%" if r.occupancy is not None else "-", ""))
        elif col == "status":
            text, style = r.status, _STATUS_STYLE.get(r.status, "red")
            w = state.winner
            if w is not None and dict(w.config) == dict(r.config):
                text, style = (text + " ✓", "bold green") if w.ok else (text + " ✗ re-check", "bold red")
            out.append((text, style))
        elif col == "message":
            line = r.message.strip().splitlines()[0] if r.message.strip() else ""
            out.append((line[:80], "red" if failed else "dim"))
    return tuple(out)


_RIGHT = {"rank", "median", "spread", "gbs", "sol", "speedup", "occ"}


def _text(col: str, cell: Cell) -> Text:
    return Text(cell[0], style=cell[1], justify="right" if col in _RIGHT or col.startswith("param:") else "left")


class Leaderboard(Vertical):
    """The table, its filter line, and a title that says what is shown and how it is sorted."""

    def __init__(self, state: DashboardState, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.state = state
        self.view = BoardView()
        self.filter_error = ""
        self.shown_keys: list[str] = []
        self.matched = 0
        self._columns: list[tuple[str, str]] = []
        self._layout: list[tuple[str, str, int]] = []
        self._rows: dict[str, tuple[Cell, ...]] = {}

    def compose(self) -> ComposeResult:
        table: DataTable = DataTable(id="board-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static(id="board-message")
        yield Input(placeholder="filter: BLOCK=256  VEC>=4  sol>50  wrong   (enter: keep, esc: close)",
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
        return ["rank"] + [f"param:{p}" for p in self.state.parameters] + [k for k, _ in FIXED]

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
        show_message = self.view.show_failed and state.failed_count > 0
        candidates = all_columns(state, show_message)
        cells = {k: row_cells(state, k, candidates) for k in keys}
        widths = {c: cell_len(label) for c, label in candidates}
        for row in cells.values():
            for (c, _), cell in zip(candidates, row):
                if cell_len(cell[0]) > widths[c]:
                    widths[c] = cell_len(cell[0])
        room = (self.size.width or 80) - 3  # the border and the scrollbar
        columns = fit_columns(candidates, widths, room)
        pick = [i for i, c in enumerate(candidates) if c in columns]
        cursor_key = self.selected_key()
        at_top = table.cursor_row == 0
        # Widths are set, not measured by the table: the layout is the same however the rows
        # arrived (a table measuring on idle can paint a frame with last frame's widths). A
        # change of width (rank 9 to 10, a longer status) builds the table again.
        layout = [(key, label, widths[key] if key != "message" else max(widths[key], 7)) for key, label in columns]
        if layout != self._layout:
            table.clear(columns=True)
            for key, label, width in layout:
                table.add_column(_text(key, (label, "bold")), key=key, width=width)
            self._columns, self._layout = columns, layout
            self._rows = {}
        wanted = set(keys)
        for key in [k for k in self._rows if k not in wanted]:
            table.remove_row(key)
            del self._rows[key]
        for key in keys:
            row = cells[key]
            cells_now = tuple(row[i] for i in pick)
            old = self._rows.get(key)
            if old is None:
                table.add_row(*[_text(c, cell) for (c, _), cell in zip(columns, cells_now)], key=key)
            elif old != cells_now:
                for (col, _), a, b in zip(columns, old, cells_now):
                    if a != b:
                        table.update_cell(key, col, _text(col, b))
            self._rows[key] = cells_now
        if [row.key.value for row in table.ordered_rows] != keys:
            self._order(keys)
        if cursor_key is not None and not at_top and cursor_key in wanted:
            table.move_cursor(row=table.get_row_index(cursor_key), animate=False)
        self.shown_keys, self.matched = keys, matched
        self._titles()
        self.show_message()

    def show_message(self) -> None:
        """Under the table, the selected configuration's message in full (a failure's reason)."""
        key = self.selected_key()
        r = self.state.entries[key].result if key in self.state.entries else None
        line = self.query_one("#board-message", Static)
        if r is None or not r.message.strip() or r.verified:
            line.display = False
            return
        line.display = True
        line.update(Text.assemble((f"{r.status}: ", "bold red"), " ".join(r.message.split())))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_message()

    def _order(self, keys: list[str]) -> None:
        """Put the rows in `keys` order. DataTable sorts by cell values: the parameter cells of a
        row name its configuration, so they map each row to its place."""
        params = [c for c, _ in self._columns if c.startswith("param:")]
        if not params:
            return
        place = {tuple(row_cells_key(self.state, k, params)): i for i, k in enumerate(keys)}

        def position(values: Any) -> int:
            vals = values if isinstance(values, tuple) else (values,)
            return place.get(tuple(v.plain for v in vals), len(place))

        self.table.sort(*params, key=position)

    def _titles(self) -> None:
        state, view = self.state, self.view
        shown = sum(1 for k in self.shown_keys if state.entries[k].result.ranked)
        title = f"Leaderboard · {state.ranked_count} ranked"
        if shown < state.ranked_count and not view.filter:
            title += f" (best {shown} shown)"
        if state.suspect:
            title += f" · {len(state.suspect)} suspect"
        if state.failed_count:
            title += f" · {state.failed_count} failed" + ("" if view.show_failed else " (f shows)")
        self.border_title = title
        sub = f"sort: {column_label(view.sort)} {'↓' if view.reverse else '↑'}"
        if self.filter_error:
            sub = f"filter error: {self.filter_error}"
        elif view.filter.strip():
            sub = f"filter: {view.filter.strip()} ({self.matched} match) · " + sub
        self.border_subtitle = sub


def row_cells_key(state: DashboardState, key: str, params: list[str]) -> list[str]:
    """The parameter cells of a configuration's row, as plain text."""
    config = state.entries[key].result.config
    out = []
    for col in params:
        v = config.get(col[6:], "")
        out.append(str(int(v)) if isinstance(v, bool) else str(v))
    return out


def _descending(column: str) -> bool:
    # Bigger is better for these: sort them best first.
    return column in ("gbs", "sol", "speedup", "occ")
