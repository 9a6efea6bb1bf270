# bora_add_plugin(<kind> <name> SOURCES <files...> [LIBRARIES <libs...>] [OUTPUT_DIRECTORY <dir>]
#                 [NO_INSTALL])
#
# Builds bora-<kind>-<name>.so, a bora plugin: a MODULE library that exports only
# bora_plugin_entry (hidden visibility), links nothing from the host (-z defs) and sees the SDK
# headers through bora::sdk. <kind> is model, optimizer, backend or tracker. Used in-tree and,
# through find_package(bora), by plugins built outside the bora repository.
include_guard(GLOBAL)

function(bora_add_plugin kind name)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT kind MATCHES "^(model|optimizer|backend|tracker)$")
    message(FATAL_ERROR "bora_add_plugin: kind '${kind}' is not model, optimizer, backend or tracker")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "bora_add_plugin(${kind} ${name}): no SOURCES")
  endif()
  set(target "bora-${kind}-${name}")
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME "${target}"
    C_STANDARD 11
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${target} PRIVATE bora::sdk ${ARG_LIBRARIES})
  # -z defs: a plugin that refers to a host symbol fails to link instead of failing to load.
  # (clang's sanitizer runtimes are not linked into modules, so skip it there.)
  if(NOT (BORA_SANITIZE AND CMAKE_C_COMPILER_ID MATCHES "Clang"))
    target_link_options(${target} PRIVATE "LINKER:-z,defs")
  endif()
  set_property(GLOBAL APPEND PROPERTY BORA_PLUGIN_TARGETS ${target})
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(BORA_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${BORA_PLUGIN_OUTPUT_DIR}")
  endif()
  if(NOT ARG_NO_INSTALL AND BORA_PLUGIN_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION "${BORA_PLUGIN_INSTALL_DIR}")
  endif()
endfunction()
