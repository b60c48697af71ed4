/* Archive transfers: export a subtree as a pax tar (optionally zstd) and
 * import a tar into a directory, both chunked by byte offset and resumable.
 *
 * Export walks the directory itself (openat/fstatat beneath the directory's
 * fd, never following symlinks) in name order and spools the archive into an
 * unlinked temporary file at start, then serves ranges of it. The same tree
 * gives the same bytes: mtimes come from the files, owners are numeric, no
 * user or group names, no atime/ctime. Kept: regular files, directories,
 * symlinks (as symlinks), hard links; skipped: sockets, fifos, devices. A
 * file with several links is archived after the walk, once its links in
 * the tree are known: at its first path, with hard links at the others. A
 * file with links outside the exported tree (elsewhere, or in an excluded
 * path) is left out, neither opened nor read, and the final read's reply
 * names it (skipped): its contents are not the tree's (another sandbox's
 * token, a cache), and the import could not restore the link anyway. A
 * file with holes is archived sparse (GNU tar's pax format 1.0: its data
 * regions found with SEEK_DATA/SEEK_HOLE, at most 128, the rest as data),
 * so a 5 GiB file of a few blocks takes a few blocks, and is extracted with
 * the same holes. An export that an import with the same limits would
 * refuse (more than archive_max_members entries, archive_max_extracted_bytes
 * of data, holes not counted, archive_max_input_bytes of archive, or names
 * and link targets over 256 MiB) is refused with LIMIT_EXCEEDED and the
 * reason; ArchiveExportStart.limits lowers the server's for one export, as
 * ArchiveImportStart.limits does for an import, so a client that will
 * import the archive again (a snapshot) learns at export time that it could
 * not.
 *
 * A streamed export (ArchiveExportStart.stream) is produced into the spool
 * by a thread of its own while reads serve the ranges already written: a
 * read ahead of production waits at most a few seconds (and at most two
 * reads wait at once, so they cannot hold every worker), then returns what
 * there is, possibly nothing, with eof false. A production error fails every
 * read after it. Closing the transfer stops the producer at its next write;
 * the next blocking archive call joins it.
 *
 * Import spools received chunks (offset must equal the bytes received; a
 * repeated chunk is acknowledged, not appended), then at finish checks the
 * whole archive before it writes anything: member count, the sum of sizes
 * (of a sparse member, its data regions; its size at most 16 TiB),
 * paths (relative, no "..", no duplicates, nothing beneath a symlink or a
 * file), types (no devices, fifos, sockets), hard links (to an earlier
 * regular file), file data (no block past the file's size, as a sparse map
 * may claim). Symbolic links are made as they are, whatever they point
 * to (absolute, "..", dangling: a Python venv's bin/python ->
 * /usr/bin/python3): making a link is safe, following one is not, and
 * extraction never follows one. It extracts with its own code beneath the
 * destination, every path opened with openat2 RESOLVE_BENEATH and
 * RESOLVE_NO_SYMLINKS (a link the archive or a process made is never passed
 * through): setuid/setgid bits cleared, owners applied only when sandboxd
 * is root, directory modes and times applied after their contents. A
 * refused archive leaves the destination untouched; an I/O error during
 * extraction may leave part of it written. Client limits lower the
 * server's (archive_max_*) and never raise them (higher values are
 * clamped).
 *
 * With ArchiveImportStart.stage and a destination that is empty at start,
 * the import is extracted while it arrives: a thread checks each header as
 * it comes and writes directories and files into ".sbx-import-HANDLE"
 * inside the destination (named in the reply's staging_path; the client
 * leaves it alone), and the finish (after the whole-archive checks and the
 * links) renames that directory's entries into place. Anything that stops it (a
 * refusal, an error, entries made in the destination meanwhile, more than 128
 * levels) removes the staging directory and falls back to the checks and
 * extraction above, whose answer is the import's. Closing the transfer
 * unfinished stops the thread; the next blocking archive call removes the
 * staging directory. Into other destinations, a mapped uncompressed archive's
 * files are written by one thread per CPU (at most 4).
 *
 * Transfers live in a table of at most limits.max_archives, under random
 * 64-bit handles; one not used for 10 minutes is dropped (checked lazily).
 * An import that has finished or failed keeps only its answer (for a
 * repeated finish; its files are closed then), and its slot goes to a new
 * transfer when every other slot is taken, the one finished longest ago
 * first: a client that does not close it keeps no one out. So does the
 * slot of a transfer abandoned in the middle, whose client's connection
 * closed (archive_table_pipe_closed), after those.
 * A transfer serves one call at a time: a second one gets CONFLICT.
 * Every handler is thread-safe. */
#ifndef SANDBOXD_ARCHIVE_H
#define SANDBOXD_ARCHIVE_H

#include <stdint.h>

#include "sandboxd/rpc/rpc.h"

/* A new, empty table for D (new; free with archive_table_free, which frees
 * every open transfer; no handler may run then). 0 or -ENOMEM. */
int archive_table_new(struct sandboxd *d, struct archive_table **out);
void archive_table_free(struct archive_table *t);
/* Stops every streamed export's production and wakes its waiting read,
 * which then fails with UNAVAILABLE; for shutdown, before the workers are
 * joined. Thread-safe; T may be NULL. */
void archive_table_stop(struct archive_table *t);
/* The connection PIPE closed: the transfers it used last are abandoned,
 * and their slots go to new transfers when every slot is taken (a client
 * that comes back on another connection before then goes on with them).
 * Thread-safe; T may be NULL. */
void archive_table_pipe_closed(struct archive_table *t, uint32_t pipe);
/* How long a transfer may stay idle before it is dropped (for tests). */
void archive_table_set_idle_ms(struct archive_table *t, uint64_t ms);

int rpc_archive_export_start(struct rpc_call *c);  /* blocking */
int rpc_archive_export_read(struct rpc_call *c);   /* blocking */
int rpc_archive_import_start(struct rpc_call *c);  /* blocking */
int rpc_archive_import_write(struct rpc_call *c);  /* blocking */
int rpc_archive_import_finish(struct rpc_call *c); /* blocking */
/* Not blocking: the transfer's files are released by the next blocking
 * archive call (or archive_table_free). */
int rpc_archive_close(struct rpc_call *c);

#endif
