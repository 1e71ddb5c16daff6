// In a folder the spec names with a relative option (`-Iinc`), inside the spec's folder.
#ifndef SCALE_H
#define SCALE_H
#define SCALE 3.0f
#endif
