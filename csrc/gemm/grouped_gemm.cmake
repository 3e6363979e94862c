# The grouped GEMM (gemm/, docs/gemm.md) on CUTLASS, added to eqx_quant_cuda
# when CUTLASS's headers are found. EQX_QUANT_CUTLASS: AUTO builds it when they
# are found (a build without it raises a clear error when a grouped GEMM runs
# on a GPU), ON requires them, OFF skips it. The headers come from the
# nvidia-cutlass wheel (a build requirement) or EQX_QUANT_CUTLASS_INCLUDE_DIR
# (another checkout's include/ folder).

set(EQX_QUANT_CUTLASS "AUTO" CACHE STRING "Build the CUTLASS grouped GEMM: AUTO, ON or OFF")
set_property(CACHE EQX_QUANT_CUTLASS PROPERTY STRINGS AUTO ON OFF)
set(EQX_QUANT_CUTLASS_INCLUDE_DIR "" CACHE PATH "CUTLASS include folder (default: the nvidia-cutlass wheel's)")

if(NOT EQX_QUANT_CUTLASS STREQUAL "OFF")
  if(NOT EQX_QUANT_CUTLASS_INCLUDE_DIR)
    find_package(Python COMPONENTS Interpreter REQUIRED)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c
        "import importlib.util as u, os; s = u.find_spec('cutlass_library'); print(os.path.join(s.submodule_search_locations[0], 'source', 'include') if s else '')"
      OUTPUT_VARIABLE _eqx_quant_cutlass_found OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _eqx_quant_cutlass_rc)
    if(_eqx_quant_cutlass_rc EQUAL 0)
      set(EQX_QUANT_CUTLASS_INCLUDE_DIR "${_eqx_quant_cutlass_found}")
    endif()
  endif()
  if(EXISTS "${EQX_QUANT_CUTLASS_INCLUDE_DIR}/cutlass/cutlass.h")
    set(_eqx_quant_build_gemm ON)
  elseif(EQX_QUANT_CUTLASS STREQUAL "ON")
    message(FATAL_ERROR "eqx_quant: EQX_QUANT_CUTLASS=ON but CUTLASS's headers were not found "
                        "(looked in '${EQX_QUANT_CUTLASS_INCLUDE_DIR}'). Install nvidia-cutlass in "
                        "the build environment or set EQX_QUANT_CUTLASS_INCLUDE_DIR.")
  else()
    message(WARNING "eqx_quant: CUTLASS's headers were not found; the CUDA library is built "
                    "without the grouped GEMM (install nvidia-cutlass in the build environment).")
  endif()
endif()

if(_eqx_quant_build_gemm)
  message(STATUS "eqx_quant: CUTLASS headers in ${EQX_QUANT_CUTLASS_INCLUDE_DIR}")
  # One generated file per kernel of gemm/grouped_gemm_instances_cuda.h (the
  # same list), so that a parallel build compiles them side by side.
  set(_eqx_quant_gemm_instances
    E4m3:E4m3:RowCol:Bf16:128:128:0 E4m3:E4m3:RowCol:F32:128:128:0
    E4m3:E5m2:RowCol:Bf16:128:128:0 E4m3:E5m2:RowCol:F32:128:128:0
    E5m2:E4m3:RowCol:Bf16:128:128:0 E5m2:E4m3:RowCol:F32:128:128:0
    Bf16:Bf16:RowCol:Bf16:128:128:0 Bf16:Bf16:RowCol:F32:128:128:0
    Bf16:Bf16:RowRow:Bf16:128:128:0 Bf16:Bf16:RowRow:F32:128:128:0
    Bf16:Bf16:ColRow:Bf16:128:128:0 Bf16:Bf16:ColRow:F32:128:128:0
    Bf16:Bf16:RowRow:Bf16:256:128:0 E4m3:E4m3:RowCol:Bf16:128:128:1)
  set(_eqx_quant_type_Bf16 "cutlass::bfloat16_t")
  set(_eqx_quant_type_E4m3 "cutlass::float_e4m3_t")
  set(_eqx_quant_type_E5m2 "cutlass::float_e5m2_t")
  set(_eqx_quant_type_F32 "float")
  # The FP8 block-scaled GEMM (gemm/fp8_block_gemm_cuda.h): one file per B scale granularity
  # and output type.
  set(_eqx_quant_gemm_sources gemm/grouped_gemm_dispatch_cuda.cu gemm/handlers_cuda.cc
    gemm/fp8_block_gemm_handler_cuda.cc gemm/fp8_block_gemm_tiles_cuda.cu
    gemm/fp8_block_gemm_rows_cuda.cu gemm/fp8_block_gemm_tiles_bf16_cuda.cu
    gemm/fp8_block_gemm_rows_bf16_cuda.cu
    # The grouped FP8 block-scaled GEMM (gemm/grouped_fp8_block_gemm_cuda.h): its handler and
    # one file per B scale granularity and output type.
    gemm/grouped_fp8_block_gemm_handler_cuda.cc gemm/grouped_fp8_block_gemm_tiles_bf16_cuda.cu
    gemm/grouped_fp8_block_gemm_tiles_f32_cuda.cu gemm/grouped_fp8_block_gemm_rows_bf16_cuda.cu
    gemm/grouped_fp8_block_gemm_rows_f32_cuda.cu)
  foreach(_instance IN LISTS _eqx_quant_gemm_instances)
    string(REPLACE ":" ";" _parts "${_instance}")
    list(GET _parts 0 A)
    list(GET _parts 1 B)
    list(GET _parts 2 L)
    list(GET _parts 3 D)
    list(GET _parts 4 TM)
    list(GET _parts 5 TN)
    list(GET _parts 6 F)
    set(A_TYPE "${_eqx_quant_type_${A}}")
    set(B_TYPE "${_eqx_quant_type_${B}}")
    set(D_TYPE "${_eqx_quant_type_${D}}")
    string(SUBSTRING "${L}" 0 3 _a_layout)
    string(SUBSTRING "${L}" 3 3 _b_layout)
    set(A_LAYOUT "RowMajor")
    set(B_LAYOUT "RowMajor")
    if(_a_layout STREQUAL "Col")
      set(A_LAYOUT "ColumnMajor")
    endif()
    if(_b_layout STREQUAL "Col")
      set(B_LAYOUT "ColumnMajor")
    endif()
    set(_file "${CMAKE_CURRENT_BINARY_DIR}/gemm/grouped_gemm_${A}${B}${L}${D}_${TM}x${TN}_${F}_cuda.cu")
    configure_file(gemm/grouped_gemm_instance_cuda.cu.in "${_file}" @ONLY)
    list(APPEND _eqx_quant_gemm_sources "${_file}")
  endforeach()
  add_library(eqx_quant_gemm_cuda OBJECT ${_eqx_quant_gemm_sources})
  target_include_directories(eqx_quant_gemm_cuda PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
  target_include_directories(eqx_quant_gemm_cuda SYSTEM PRIVATE
    "${XLA_FFI_INCLUDE_DIR}" "${EQX_QUANT_CUTLASS_INCLUDE_DIR}"
    "$<$<COMPILE_LANGUAGE:CXX>:${CUDAToolkit_INCLUDE_DIRS}>")  # the handlers (C++)
  # NDEBUG: CUTLASS's device asserts are calls, which serialize the wgmma
  # pipeline. No -Wextra: CUTLASS's headers are not ours to fix.
  target_compile_options(eqx_quant_gemm_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-DNDEBUG --expt-relaxed-constexpr -lineinfo>)
  target_sources(eqx_quant_cuda PRIVATE $<TARGET_OBJECTS:eqx_quant_gemm_cuda>)
endif()
