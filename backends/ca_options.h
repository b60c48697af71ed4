/* The options of the backends that reach sandboxd over mutual TLS with
 * sbx's CA (remote, kubernetes), as two entries of a struct backend_option
 * table: where the CA is and which client certificate to present. Neither
 * may be set by a request to sbx serve: they name the server's files. */
#ifndef SBX_BACKENDS_CA_OPTIONS_H
#define SBX_BACKENDS_CA_OPTIONS_H

#define BACKEND_CA_OPTIONS                                                     \
  {"ca_dir",                                                                   \
   "ca-dir",                                                                   \
   "DIR",                                                                      \
   "sbx's CA (default: STATE-DIR/ca)",                                         \
   BACKEND_OPTION_STRING,                                                      \
   ""},                                                                        \
  {                                                                            \
    "client", "client", "NAME",                                                \
        "the client certificate CA-DIR/clients/NAME.crt to present (default "  \
        "\"default\", issued on first use)",                                   \
        BACKEND_OPTION_STRING, ""                                              \
  }

#endif
