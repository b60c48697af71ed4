# cmake -DIN=FILE -DOUT=FILE.c -DNAME=SYMBOL -P embed.cmake: writes FILE as
# a C array SYMBOL (NUL-terminated) with SYMBOL_len, so that the server
# carries its documents without reading them from disk.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT}
  "#include <stddef.h>\n"
  "extern const char ${NAME}[];\n"
  "extern const size_t ${NAME}_len;\n"
  "const char ${NAME}[] = {\n${bytes}0x00};\n"
  "const size_t ${NAME}_len = ${len};\n")
