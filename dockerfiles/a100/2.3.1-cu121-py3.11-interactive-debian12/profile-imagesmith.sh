# GENERATED — do not edit; run `imagesmith render`
# imagesmith interactive flavor: /etc/profile.d/imagesmith-env.sh. A login shell over ssh (a terminal, VS Code
# Remote-SSH) gets the container's environment back: Debian's /etc/profile resets PATH. imagesmith-start writes
# /root/.ssh/environment at each start (the container's variables, without the secrets).
if [ -r /root/.ssh/environment ]; then
    while IFS= read -r imagesmith_line; do
        case "$imagesmith_line" in
            [A-Za-z_]*=*) export "$imagesmith_line" ;;
        esac
    done </root/.ssh/environment
    unset imagesmith_line
fi
