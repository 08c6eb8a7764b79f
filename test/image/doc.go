// Package image proves the Dockerfile without a container engine, which the build machines lack.
//
// dockerfile_test.go reads the Dockerfile (stages, COPY, RUN, WORKDIR, ARG, ENV, USER, ENTRYPOINT) and
// .dockerignore. image_test.go replays the builder stage in a temporary directory that stands for the
// container's root: it copies exactly the paths the stage's COPY lines copy from the repository (what
// .dockerignore leaves out stays out), runs its RUN lines with /bin/sh as the builder image would, offline
// from the local module cache, and checks that the binary the runtime stage copies is there and statically
// linked (no ELF interpreter, no shared library). A package the operator imports from a directory no COPY line
// copies fails the build here, not at release. It then checks the runtime stage: a base without a shell
// (distroless static or scratch), a numeric non-root USER, no RUN, and an exec-form ENTRYPOINT naming the
// copied binary, which is also the command the chart and config/manager run.
package image
