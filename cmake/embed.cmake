# cmake -DINPUT=file -DOUTPUT=header.h -DNAME=symbol -P embed.cmake: a file's bytes as a C array
# `static const unsigned char NAME[]` with a NUL after them (its length is sizeof NAME - 1), so a text
# asset such as the dashboard's page is kept as itself in the tree and built into the binary.
file(READ "${INPUT}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)"
       "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp"
     "/* generated from ${INPUT} by cmake/embed.cmake */\nstatic const unsigned char ${NAME}[] = {\n${bytes}0x00};\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
