"""Open the host's secret by its host path."""
def main(args):
    p = args.params
    if reads_secret(p["secret_path"], p["secret"]):
        return escaped("host path readable inside")
    return stopped("host path not visible")
