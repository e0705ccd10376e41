from tritonpkg.cli import main

main()
