/* Archive transfers: export a subtree as a pax tar (optionally zstd) and
 * import a tar into a directory, both chunked by byte offset and resumable.
 *
 * Export spools the archive into an unlinked temporary file at start, then
 * serves ranges of it. Import spools received chunks, then at finish checks
 * the whole archive (members, sizes, paths, links, types, limits) before it
 * writes anything, and extracts beneath the destination with openat2 rules.
 * Refused: absolute paths, "..", links pointing outside, device nodes, fifos,
 * setuid/setgid bits (cleared), more than the limits. */
#ifndef SANDBOXD_ARCHIVE_H
#define SANDBOXD_ARCHIVE_H

#include "rpc.h"

int archive_table_new(struct sandboxd *d, struct archive_table **out);
void archive_table_free(struct archive_table *t);

int rpc_archive_export_start(struct rpc_call *c);  /* blocking */
int rpc_archive_export_read(struct rpc_call *c);   /* blocking */
int rpc_archive_import_start(struct rpc_call *c);  /* blocking */
int rpc_archive_import_write(struct rpc_call *c);  /* blocking */
int rpc_archive_import_finish(struct rpc_call *c); /* blocking */
int rpc_archive_close(struct rpc_call *c);

#endif
