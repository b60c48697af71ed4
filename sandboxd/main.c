/* sandboxd: the daemon inside every sandbox. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    printf("sandboxd %s\n", SBX_VERSION);
    return 0;
  }
  fprintf(stderr, "usage: sandboxd --version\n");
  return 2;
}
