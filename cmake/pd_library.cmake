# pd_library(NAME dir... DEPS dep...): a static library of every .cpp in the
# given folders (globbed, so adding a file needs no CMake edit). A folder
# with no sources yet gives an INTERFACE library carrying the same deps.
function(pd_library name)
  cmake_parse_arguments(ARG "" "" "DIRS;DEPS" ${ARGN})
  set(sources "")
  foreach(d ${ARG_DIRS})
    file(GLOB found CONFIGURE_DEPENDS ${d}/*.cpp)
    list(APPEND sources ${found})
  endforeach()
  if(sources)
    add_library(${name} STATIC ${sources})
    target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  else()
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
  endif()
endfunction()
