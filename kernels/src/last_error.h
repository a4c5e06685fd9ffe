// The setter behind fp4_last_error(), for parts of the library that live outside dispatch.cpp
// (the CUDA front end), so every entry point reports through the same thread-local message.
#pragma once

#include "fp4lab/kernels/fp4.h"

#ifdef __cplusplus
extern "C" {
#endif

// Stores `message` as this thread's fp4_last_error() text. `status` is the code the caller is
// about to return; it is passed so the message and the code travel together.
void fp4lab_set_last_error(fp4_status status, const char* message);

#ifdef __cplusplus
}
#endif
