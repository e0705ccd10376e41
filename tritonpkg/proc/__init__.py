"""The lowest floor for talking to local processes: free loopback ports, children in their own process
group (started and stopped as a group), this interpreter's directories, plain HTTP calls to a local server
and the end of its log, and the header Triton's restricted admin APIs want. It imports nothing of tritonpkg
but `tritonpkg.errors`, so every other package (runtime, serve, deploy, frontend, plugins, benches) may
import it."""
