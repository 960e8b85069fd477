# Embeds a text file into C++ as `const char* swarm::FUNCTION()`, at build time,
# so a page is edited as a page and still ships inside the one binary.
# Usage: cmake -DIN=page.html -DOUT=page.cpp -DFUNCTION=name -DHEADER=dir/page.hpp -P embed.cmake
file(READ "${IN}" content)
string(FIND "${content}" ")swarm_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )swarm_embed\"")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by cmake/embed.cmake: edit that file, not this one.\n"
  "#include \"${HEADER}\"\n\n"
  "namespace swarm {\n\n"
  "const char* ${FUNCTION}() {\n"
  "  return R\"swarm_embed(${content})swarm_embed\";\n"
  "}\n\n"
  "} // namespace swarm\n")
# Only a changed file is rewritten, so an unchanged page does not recompile anything.
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
