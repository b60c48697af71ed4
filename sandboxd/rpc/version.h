#ifndef SANDBOXD_VERSION_H
#define SANDBOXD_VERSION_H
/* sandboxd's release string, e.g. "0.1.0". */
const char *sandboxd_version(void);
#endif
