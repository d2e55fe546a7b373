"""A page of a workspace's files as a tree of folders, for the Files panel.

The page is a window of the sorted paths (`offset`, `limit`); its rows open and close
folders around the files, so a template draws nested, collapsible folders from a flat
list. A page that starts inside a folder opens it again at its top.
"""

from __future__ import annotations

from dataclasses import dataclass

from projections.workspace import Manifest

OPEN, FILE, CLOSE = "open", "file", "close"


@dataclass(frozen=True, slots=True)
class FileRow:
    kind: str  # open (a folder), file, close (the folder opened last)
    name: str = ""  # the folder's or the file's own name
    path: str = ""  # the folder's or the file's whole path
    depth: int = 0
    size: int = 0
    mode: int = 0


@dataclass(frozen=True, slots=True)
class FilesPage:
    rows: tuple[FileRow, ...]
    total: int  # files in the workspace
    bytes: int  # their sizes summed
    offset: int
    shown: int  # files on this page
    next_offset: int | None  # where the next page starts; None on the last

    @property
    def after(self) -> int:
        """Files after this page."""
        return self.total - self.offset - self.shown


def files_page(manifest: Manifest, *, offset: int = 0, limit: int = 300) -> FilesPage:
    paths = sorted(manifest)
    offset = min(max(offset, 0), len(paths))
    chunk = paths[offset : offset + limit]
    rows: list[FileRow] = []
    open_folders: list[str] = []
    for path in chunk:
        *folders, name = path.split("/")
        shared = 0
        while (
            shared < len(open_folders)
            and shared < len(folders)
            and open_folders[shared] == folders[shared]
        ):
            shared += 1
        while len(open_folders) > shared:
            open_folders.pop()
            rows.append(FileRow(CLOSE))
        for folder in folders[shared:]:
            open_folders.append(folder)
            rows.append(FileRow(OPEN, folder, "/".join(open_folders), depth=len(open_folders) - 1))
        state = manifest[path]
        rows.append(FileRow(FILE, name, path, len(folders), state.size, state.mode))
    rows.extend(FileRow(CLOSE) for _ in open_folders)
    end = offset + len(chunk)
    return FilesPage(
        rows=tuple(rows),
        total=len(paths),
        bytes=sum(state.size for state in manifest.values()),
        offset=offset,
        shown=len(chunk),
        next_offset=end if end < len(paths) else None,
    )
